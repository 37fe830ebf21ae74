//! NodeResourcesFit (filter and LeastAllocated score) and
//! NodeResourcesBalancedAllocation.

use crate::framework::{Cycle, Plugin, MAX_NODE_SCORE};
use crate::resources::{CPU, MEMORY, PODS};
use crate::snapshot::{non_zero_requests, NodeInfo};


/// The pod fits the node's `status.allocatable`: every requested resource (extended
/// ones included) and one more pod.
pub struct NodeResourcesFit;

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }
    fn filter(&self, cx: &Cycle, node: &NodeInfo) -> Vec<String> {
        let mut out = Vec::new();
        let allowed_pods = node.allocatable.0.get(PODS).copied().unwrap_or(110);
        if node.requested.get(PODS) + 1 > allowed_pods {
            out.push("Too many pods".to_string());
        }
        for (name, &want) in &cx.requests.0 {
            if want <= 0 || name == PODS {
                continue;
            }
            let free = node.allocatable.get(name) - node.requested.get(name);
            if want > free {
                out.push(format!("Insufficient {name}"));
            }
        }
        out
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let (cpu, mem) = fractions(cx, node);
        // LeastAllocated: the free share, cpu and memory weighted equally.
        Some((((1.0 - cpu) + (1.0 - mem)) / 2.0 * MAX_NODE_SCORE as f64) as i64)
    }
}

/// The share of cpu and memory taken on `node` once the pod is placed (capped at 1).
fn fractions(cx: &Cycle, node: &NodeInfo) -> (f64, f64) {
    let (pod_cpu, pod_mem) = non_zero_requests(&cx.requests);
    let share = |name: &str, on_node: i64, pod: i64| {
        let alloc = node.allocatable.get(name);
        if alloc <= 0 {
            return 1.0;
        }
        ((on_node + pod) as f64 / alloc as f64).min(1.0)
    };
    (share(CPU, node.non_zero_requested.0, pod_cpu), share(MEMORY, node.non_zero_requested.1, pod_mem))
}

/// Nodes whose cpu and memory shares stay close to each other score higher.
pub struct BalancedAllocation;

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }
    fn score(&self, cx: &Cycle, node: &NodeInfo) -> Option<i64> {
        let (cpu, mem) = fractions(cx, node);
        let std = (cpu - mem).abs() / 2.0;
        Some(((1.0 - std) * MAX_NODE_SCORE as f64) as i64)
    }
}
