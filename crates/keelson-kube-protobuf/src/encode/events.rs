//! Encoders for response-only kinds: `v1` `Event`, `events.k8s.io/v1`
//! `Event`, `v1` `Endpoints` and `discovery.k8s.io/v1` `EndpointSlice`.

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::discovery::v1 as discovery;
use k8s_pb::api::events::v1 as events;

use super::core_v1::object_reference;
use super::fields::{Fields, Result};
use super::meta::object_meta;

fn event_source(f: &mut Fields<'_>) -> Result<core::EventSource> {
    Ok(core::EventSource {
        component: f.string("component")?,
        host: f.string("host")?,
    })
}

/// `v1` `Event` (`eventTime` and `series.lastObservedTime` are
/// `MicroTime`s).
pub fn core_event(f: &mut Fields<'_>) -> Result<core::Event> {
    Ok(core::Event {
        metadata: f.message("metadata", object_meta)?,
        involved_object: f.message("involvedObject", object_reference)?,
        reason: f.string("reason")?,
        message: f.string("message")?,
        source: f.message("source", event_source)?,
        first_timestamp: f.time("firstTimestamp")?,
        last_timestamp: f.time("lastTimestamp")?,
        count: f.i32("count")?,
        r#type: f.string("type")?,
        event_time: f.micro_time("eventTime")?,
        series: f.message("series", |s| {
            Ok(core::EventSeries {
                count: s.i32("count")?,
                last_observed_time: s.micro_time("lastObservedTime")?,
            })
        })?,
        action: f.string("action")?,
        related: f.message("related", object_reference)?,
        reporting_component: f.string("reportingComponent")?,
        reporting_instance: f.string("reportingInstance")?,
    })
}

/// `events.k8s.io/v1` `Event`.
pub fn event(f: &mut Fields<'_>) -> Result<events::Event> {
    Ok(events::Event {
        metadata: f.message("metadata", object_meta)?,
        event_time: f.micro_time("eventTime")?,
        series: f.message("series", |s| {
            Ok(events::EventSeries {
                count: s.i32("count")?,
                last_observed_time: s.micro_time("lastObservedTime")?,
            })
        })?,
        reporting_controller: f.string("reportingController")?,
        reporting_instance: f.string("reportingInstance")?,
        action: f.string("action")?,
        reason: f.string("reason")?,
        regarding: f.message("regarding", object_reference)?,
        related: f.message("related", object_reference)?,
        note: f.string("note")?,
        r#type: f.string("type")?,
        deprecated_source: f.message("deprecatedSource", event_source)?,
        deprecated_first_timestamp: f.time("deprecatedFirstTimestamp")?,
        deprecated_last_timestamp: f.time("deprecatedLastTimestamp")?,
        deprecated_count: f.i32("deprecatedCount")?,
    })
}

fn endpoint_address(f: &mut Fields<'_>) -> Result<core::EndpointAddress> {
    Ok(core::EndpointAddress {
        ip: f.string("ip")?,
        hostname: f.string("hostname")?,
        node_name: f.string("nodeName")?,
        target_ref: f.message("targetRef", object_reference)?,
    })
}

/// `v1` `Endpoints`.
pub fn endpoints(f: &mut Fields<'_>) -> Result<core::Endpoints> {
    Ok(core::Endpoints {
        metadata: f.message("metadata", object_meta)?,
        subsets: f.messages("subsets", |s| {
            Ok(core::EndpointSubset {
                addresses: s.messages("addresses", endpoint_address)?,
                not_ready_addresses: s.messages("notReadyAddresses", endpoint_address)?,
                ports: s.messages("ports", |p| {
                    Ok(core::EndpointPort {
                        name: p.string("name")?,
                        port: p.i32("port")?,
                        protocol: p.string("protocol")?,
                        app_protocol: p.string("appProtocol")?,
                    })
                })?,
            })
        })?,
    })
}

/// `discovery.k8s.io/v1` `EndpointSlice`.
pub fn endpoint_slice(f: &mut Fields<'_>) -> Result<discovery::EndpointSlice> {
    Ok(discovery::EndpointSlice {
        metadata: f.message("metadata", object_meta)?,
        address_type: f.string("addressType")?,
        endpoints: f.messages("endpoints", |e| {
            Ok(discovery::Endpoint {
                addresses: e.strings("addresses")?,
                conditions: e.message("conditions", |c| {
                    Ok(discovery::EndpointConditions {
                        ready: c.boolean("ready")?,
                        serving: c.boolean("serving")?,
                        terminating: c.boolean("terminating")?,
                    })
                })?,
                hostname: e.string("hostname")?,
                target_ref: e.message("targetRef", object_reference)?,
                deprecated_topology: e.string_map("deprecatedTopology")?,
                node_name: e.string("nodeName")?,
                zone: e.string("zone")?,
                hints: e.message("hints", |h| {
                    Ok(discovery::EndpointHints {
                        for_zones: h.messages("forZones", |z| {
                            Ok(discovery::ForZone {
                                name: z.string("name")?,
                            })
                        })?,
                        for_nodes: h.messages("forNodes", |n| {
                            Ok(discovery::ForNode {
                                name: n.string("name")?,
                            })
                        })?,
                    })
                })?,
            })
        })?,
        ports: f.messages("ports", |p| {
            Ok(discovery::EndpointPort {
                name: p.string("name")?,
                protocol: p.string("protocol")?,
                port: p.i32("port")?,
                app_protocol: p.string("appProtocol")?,
            })
        })?,
    })
}
