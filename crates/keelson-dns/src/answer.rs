//! The answer to one DNS request, as a pure function of the zone and the request: an
//! authoritative reply for names in the cluster domain (NXDOMAIN with the SOA for names
//! that do not exist, NODATA with the SOA for types a name lacks), or "forward" for every
//! other name.

use std::net::IpAddr;
use std::str::FromStr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::zone::{Data, Zone};

/// Answers carry CoreDNS' default TTL for cluster records.
pub const TTL: u32 = 5;

/// What to do with a request.
#[derive(Debug)]
pub enum Outcome {
    /// Send this reply.
    Reply(Message),
    /// Not ours: pass the request to the node's resolvers.
    Forward,
}

fn name(s: &str) -> Option<Name> {
    Name::from_str(&format!("{s}.")).ok()
}

fn soa(zone: &Zone) -> Option<Record> {
    let d = &zone.domain;
    let data = SOA::new(name(&format!("ns.dns.{d}"))?, name(&format!("hostmaster.{d}"))?, 1, 7200, 1800, 86400, TTL);
    Some(Record::from_rdata(name(d)?, TTL, RData::SOA(data)))
}

fn reply(req: &Message, code: ResponseCode) -> Message {
    let mut m = Message::new(req.metadata.id, MessageType::Response, req.metadata.op_code);
    m.metadata.recursion_desired = req.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.metadata.response_code = code;
    m.add_queries(req.queries.iter().cloned());
    m
}

/// The address a `<a-b-c-d>.<ns>.pod.<domain>` name stands for (A), or for IPv6 the
/// address with its colons as dashes, `fd42--7.<ns>.pod.<domain>` (AAAA).
fn pod_address(zone: &Zone, qname: &str) -> Option<IpAddr> {
    let rest = qname.strip_suffix(&format!(".pod.{}", zone.domain))?;
    let (label, ns) = rest.split_once('.')?;
    if ns.is_empty() || ns.contains('.') {
        return None;
    }
    let v4 = label.replace('-', ".").parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4);
    v4.or_else(|| label.replace('-', ":").parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6))
}

fn in_domain(zone: &Zone, qname: &str) -> bool {
    qname == zone.domain || qname.ends_with(&format!(".{}", zone.domain))
}

fn records(zone: &Zone, owner: &Name, qname: &str, qtype: RecordType) -> (bool, Vec<Record>) {
    let mut out = Vec::new();
    let mut exists = zone.exists(qname);
    let mut data: Vec<Data> = zone.names.get(qname).map(|s| s.iter().cloned().collect()).unwrap_or_default();
    if let Some(ip) = pod_address(zone, qname) {
        exists = true;
        data.push(Data::Ip(ip));
    }
    for d in data {
        let rdata = match (&d, qtype) {
            (Data::Cname(target), _) => name(target).map(|n| RData::CNAME(CNAME(n))),
            (Data::Ip(IpAddr::V4(ip)), RecordType::A | RecordType::ANY) => Some(RData::A(A(*ip))),
            (Data::Ip(IpAddr::V6(ip)), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(*ip))),
            (Data::Srv { port, target }, RecordType::SRV | RecordType::ANY) => name(target).map(|n| RData::SRV(SRV::new(0, 100, *port, n))),
            _ => None,
        };
        if let Some(r) = rdata {
            out.push(Record::from_rdata(owner.clone(), TTL, r));
        }
    }
    (exists, out)
}

/// Answers `req` from `zone`, or says to forward it.
pub fn answer(zone: &Zone, req: &Message) -> Outcome {
    if req.metadata.message_type != MessageType::Query || req.metadata.op_code != OpCode::Query {
        return Outcome::Reply(reply(req, ResponseCode::NotImp));
    }
    let Some(q) = req.queries.first().filter(|_| req.queries.len() == 1) else {
        return Outcome::Reply(reply(req, ResponseCode::FormErr));
    };
    let qname = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
    if !in_domain(zone, &qname) {
        return Outcome::Forward;
    }
    let (exists, answers) = records(zone, q.name(), &qname, q.query_type());
    let mut m = reply(req, if exists { ResponseCode::NoError } else { ResponseCode::NXDomain });
    m.metadata.authoritative = true;
    // SRV answers bring the addresses of their targets along.
    let additional: Vec<Record> = answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some(srv.target.clone()),
            _ => None,
        })
        .flat_map(|target| {
            let t = target.to_ascii().trim_end_matches('.').to_ascii_lowercase();
            records(zone, &target, &t, RecordType::A).1
        })
        .collect();
    if answers.is_empty() {
        m.add_authorities(soa(zone));
    }
    m.add_answers(answers);
    m.add_additionals(additional);
    Outcome::Reply(m)
}

/// A request for `qname`/`qtype` (tests and probes).
pub fn request(id: u16, qname: &str, qtype: RecordType) -> Option<Message> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name(qname.trim_end_matches('.'))?, qtype));
    Some(m)
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
