//! Who is asking ([`authn`]), what they ask ([`attributes`]), whether they may
//! ([`authz`]), and ServiceAccount tokens ([`sa_token`]).

pub mod attributes;
pub mod authn;
pub mod sa_token;
pub mod authz;
