//! UDP flows to a removed endpoint are flushed with the real `conntrack` tool, in a
//! network namespace this test makes: a UDP Service's client keeps one source port, so
//! once its first packet is translated to endpoint A, conntrack sends every later one to
//! A, even after the rules no longer name A. The flows that [`udp_flows`] says are gone
//! are what [`flush_udp`] removes, after which the next packet reaches B. Needs root,
//! `nft`, `ip` and `conntrack`; skipped loudly otherwise (failed with
//! KEELSON_REQUIRE_NODE_TESTS).

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keelson_proxy::diff::diff;
use keelson_proxy::nft::flush_udp;
use keelson_proxy::render::{render, replace_script, udp_flows, NodeInfo};
use serde_json::json;

mod netns_support;

use netns_support::{nft_in, sh, skipped};

extern "C" {
    fn setns(fd: i32, nstype: i32) -> i32;
}

const CLONE_NEWNET: i32 = 0x4000_0000;

/// A namespace of the test's own, deleted on drop.
struct Ns(String);

impl Ns {
    fn exec(&self, cmd: &str) -> Result<String> {
        sh(&format!("ip netns exec {} {cmd}", self.0))
    }

    /// Runs `f` on a thread inside the namespace (processes it starts are in it too).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        let file = std::fs::File::open(format!("/run/netns/{}", self.0)).context("the namespace")?;
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on this thread only, with a namespace file it holds open.
                if unsafe { setns(file.as_raw_fd(), CLONE_NEWNET) } != 0 {
                    bail!("setns: {}", std::io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
            .expect("the namespace thread")
        })
    }

    /// The endpoint the namespace's conntrack sends the test's UDP flow to.
    fn flow_endpoint(&self) -> Result<Option<String>> {
        let out = self.exec("conntrack -L -p udp --orig-dst 10.43.0.7 --orig-port-src 40000 2>/dev/null")?;
        // The reply direction's source is the endpoint: the second `src=` of the entry.
        Ok(out.lines().next().and_then(|l| l.split_whitespace().filter_map(|w| w.strip_prefix("src=")).nth(1)).map(str::to_string))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns del {}", self.0));
    }
}

fn service() -> Service {
    serde_json::from_value(json!({"metadata": {"name": "dns", "namespace": "d"},
        "spec": {"clusterIP": "10.43.0.7", "ports": [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]}})).unwrap()
}

fn slice(ip: &str) -> EndpointSlice {
    serde_json::from_value(json!({"metadata": {"name": "dns-0", "namespace": "d", "labels": {"kubernetes.io/service-name": "dns"}}, "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "nodeName": "n1", "conditions": {"ready": true}}], "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}]})).unwrap()
}

#[test]
fn udp_flows_to_a_removed_endpoint_are_flushed_and_move_to_the_new_one() -> Result<()> {
    if skipped("udp_flows_to_a_removed_endpoint_are_flushed_and_move_to_the_new_one", &["nft", "ip", "conntrack"]) {
        return Ok(());
    }
    let ns = Ns(format!("kpct-{}", std::process::id() % 100_000));
    let _ = sh(&format!("ip netns del {}", ns.0));
    sh(&format!("ip netns add {}", ns.0))?;
    ns.exec("ip link set lo up")?;
    ns.exec("ip link add br0 type bridge")?;
    ns.exec("ip addr add 10.42.1.1/24 dev br0")?;
    ns.exec("ip link set br0 up")?;
    ns.exec("ip route add 10.43.0.0/16 dev br0")?;
    // The two endpoints: addresses of the namespace itself, each with a UDP listener.
    ns.exec("ip addr add 10.42.1.2/32 dev lo")?;
    ns.exec("ip addr add 10.42.1.3/32 dev lo")?;
    let node = NodeInfo { name: "n1".into(), addresses: vec!["192.168.77.2".parse()?], pod_cidrs: vec!["10.42.1.0/24".into()], dns: None };
    let svc = service();
    let (a, b) = (slice("10.42.1.2"), slice("10.42.1.3"));
    let first = render(&[&svc], &[&a], &node);
    nft_in(&ns.0, &replace_script(&first.table()))?;

    ns.run(|| -> Result<()> {
        let _listeners = [UdpSocket::bind("10.42.1.2:5353")?, UdpSocket::bind("10.42.1.3:5353")?];
        let client = UdpSocket::bind("10.42.1.1:40000")?;
        let send = || client.send_to(b"query", "10.43.0.7:53").map(|_| std::thread::sleep(Duration::from_millis(50)));
        send()?;
        assert_eq!(ns.flow_endpoint()?.as_deref(), Some("10.42.1.2"), "the first packet goes to A");

        // The rules now name only B, but the flow stays with A.
        let second = render(&[&svc], &[&b], &node);
        nft_in(&ns.0, &diff(&first, &second))?;
        send()?;
        assert_eq!(ns.flow_endpoint()?.as_deref(), Some("10.42.1.2"), "conntrack keeps the flow on A until it is flushed");

        let gone: Vec<_> = udp_flows(&[&svc], &[&a], &node).difference(&udp_flows(&[&svc], &[&b], &node)).copied().collect();
        assert_eq!(gone, [("10.43.0.7".parse()?, 53, "10.42.1.2".parse()?)]);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        for (vip, port, ep) in gone {
            assert!(runtime.block_on(flush_udp(vip, port, ep)), "the conntrack tool ran");
        }
        assert_eq!(ns.flow_endpoint()?, None, "the flow to A is gone");
        send()?;
        assert_eq!(ns.flow_endpoint()?.as_deref(), Some("10.42.1.3"), "the next packet goes to B");
        Ok(())
    })??;
    Ok(())
}
