//! Who is asking ([`authn`]), what they ask ([`attributes`]), whether they may
//! ([`authz`]), ServiceAccount tokens ([`sa_token`]), and failed attempts limited per
//! source ([`lockout`]).

pub mod attributes;
pub mod authn;
pub mod sa_token;
pub mod authz;
pub mod lockout;
