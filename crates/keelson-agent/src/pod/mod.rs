//! Running one pod: [`plan`] decides (pure), [`status`] reports (pure), [`worker`]
//! performs, with [`probe`]s, [`volumes`], [`env`] and [`resources`] as its parts.

pub mod dns;
pub mod env;
pub mod plan;
pub mod probe;
pub mod pull_secrets;
pub mod resources;
pub mod status;
pub mod volumes;
pub mod worker;
