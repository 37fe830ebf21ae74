//! Kubernetes RBAC authorization as pure functions.
//!
//! - [`types`]: [`UserInfo`], request [`Attributes`], [`Decision`];
//! - [`policy`]: RBAC objects read from their `rbac.authorization.k8s.io/v1`
//!   JSON and the rule matchers (wildcards, subresources, resourceNames,
//!   nonResourceURLs);
//! - [`snapshot`]: [`RbacSnapshot`], all RBAC objects of a cluster, with
//!   [`RbacSnapshot::authorize`] and [`RbacSnapshot::rules_for`];
//! - [`messages`]: the exact Kubernetes 403 texts ([`forbidden_message`]);
//! - [`bootstrap`]: the default ClusterRoles and ClusterRoleBindings
//!   ([`bootstrap_policy`]);
//! - [`node`]: the Node-restriction rules for kubelet identities
//!   ([`node_name`], [`node_restriction`]).
//!
//! Architecture invariant: nothing here does I/O, spawns, or keeps global
//! state; the API server feeds objects in and asks questions.

pub mod bootstrap;
pub mod messages;
pub mod node;
pub mod policy;
pub mod snapshot;
pub mod types;

pub use bootstrap::bootstrap_policy;
pub use messages::{forbidden_message, forbidden_message_with_reason};
pub use node::{node_name, node_restriction};
pub use policy::{ParseError, PolicyRule};
pub use keelson_apimachinery::labels::LabelSelector;
pub use snapshot::{
    NonResourceRule, RbacKind, RbacSnapshot, ResourceRule, RulesReview, SnapshotError,
};
pub use types::{Attributes, Decision, NonResourceAttributes, ResourceAttributes, UserInfo};
