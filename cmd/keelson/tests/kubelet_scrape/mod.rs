//! Reads an agent's own `/metrics` on its kubelet port (`nodes/metrics`), as a Prometheus
//! scraper with the admin's client certificate would.

use std::path::Path;

use k8s_openapi::api::core::v1::Node;

/// The agent's `/metrics` page, found from the Node's InternalIP and kubelet endpoint.
pub async fn agent_metrics(kubeconfig: &Path, node: &Node) -> String {
    let st = node.status.as_ref().expect("a node status");
    let ip = st.addresses.as_ref().expect("node addresses").iter().find(|a| a.type_ == "InternalIP").expect("an InternalIP").address.clone();
    let port = st.daemon_endpoints.as_ref().and_then(|d| d.kubelet_endpoint.as_ref()).expect("a kubelet endpoint").port;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    config.cluster_url = format!("https://{ip}:{port}").parse().unwrap();
    // The agent's serving certificate is self-signed, as the kubelet's by default.
    config.accept_invalid_certs = true;
    config.root_cert = None;
    config.tls_server_name = None;
    let client = kube::Client::try_from(config).unwrap();
    client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.expect("the agent's /metrics")
}

/// The value of the first line of `page` starting with `series` (0 when none does).
pub fn series_value(page: &str, series: &str) -> f64 {
    page.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
}
