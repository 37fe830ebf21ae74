//! The plugins of Kubernetes' default profile and their weights.

pub mod fit;
pub mod node;
pub mod pod_affinity;
pub mod spread;
pub mod volume;

#[cfg(test)]
mod tests;

use crate::framework::Profile;

/// Kubernetes' default profile (VolumeBinding reduced to Keelson's volumes): filters in its order; scores with its weights
/// (TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2,
/// NodeResourcesFit 1, BalancedAllocation 1, ImageLocality 1).
pub fn default_profile() -> Profile {
    Profile {
        plugins: vec![
            (Box::new(node::NodeUnschedulable), 0),
            (Box::new(node::NodeName), 0),
            (Box::new(node::TaintToleration), 3),
            (Box::new(node::NodeAffinity), 2),
            (Box::new(node::NodePorts), 0),
            (Box::new(fit::NodeResourcesFit), 1),
            (Box::new(volume::VolumeBinding), 0),
            (Box::new(spread::PodTopologySpread), 2),
            (Box::new(pod_affinity::InterPodAffinity), 2),
            (Box::new(fit::BalancedAllocation), 1),
            (Box::new(node::ImageLocality), 1),
        ],
    }
}
