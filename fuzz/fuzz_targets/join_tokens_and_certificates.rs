//! What a joining server or client hands over: join tokens, CA PEM, and client
//! certificates (DER) whose subject names the user. Never a panic; a token that parses
//! prints as itself.
#![no_main]

use keelson_pki::{ca_hash, certificate_expiry, client_identity, JoinToken};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = client_identity(data);
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(token) = JoinToken::parse(text) {
        let printed = token.to_string();
        assert_eq!(JoinToken::parse(&printed).as_ref().map(ToString::to_string), Ok(printed.clone()), "token {text:?}");
        assert_eq!(token.credential().len(), 6 + 1 + 16);
    }
    let _ = ca_hash(text);
    let _ = certificate_expiry(text);
});
