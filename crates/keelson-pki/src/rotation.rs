//! Reissuing a certificate in use before it expires, without a restart.
//!
//! A [`LiveCert`] is a certificate a server presents and can replace while it runs: the
//! API serving certificate, a server's peer (Raft and store gRPC) certificate. New TLS
//! handshakes get the new certificate; connections already open keep working, since TLS
//! authenticates only at the handshake. [`run`] checks the certificate in use every
//! `check_every`; when [`renewal_due`] says so it issues a new one from the cluster CA
//! ([`ClusterCa::issue_serving_valid_for`]: server and client authentication, the same
//! names) and installs it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{certificate_expiry, ClusterCa, IssuedCert, PkiError};

/// Why one rotation attempt failed; the certificate in use stays in use.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The CA could not be loaded or the new certificate not issued.
    #[error("issuing a new certificate: {0}")]
    Issue(#[source] PkiError),
    /// The holder refused the new certificate.
    #[error("installing the new certificate: {0}")]
    Install(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// A certificate in use that can be replaced while in use.
pub trait LiveCert: Send + Sync {
    /// The certificate in use (PEM).
    fn cert_pem(&self) -> String;
    /// Puts `cert` in use for every handshake from now on. An error leaves the old one.
    fn install(&self, cert: &IssuedCert) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// What to reissue, and when.
#[derive(Clone)]
pub struct CertRotation {
    /// What the certificate is for, in logs ("API serving", "peer").
    pub purpose: &'static str,
    /// The cluster CA that signs the new certificates (PEM).
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    /// Subject CN and SANs (DNS names or IP addresses) of each new certificate.
    pub common_name: String,
    pub names: Vec<String>,
    /// Validity of each new certificate.
    pub validity: Duration,
    /// Reissue when less than this is left.
    pub renew_before: Duration,
    pub check_every: Duration,
    /// Where to save each new certificate, `(DIR, NAME)`: `DIR/NAME.crt`, `DIR/NAME.key`.
    pub save_as: Option<(PathBuf, String)>,
}

impl fmt::Debug for CertRotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the CA key.
        f.debug_struct("CertRotation")
            .field("purpose", &self.purpose)
            .field("common_name", &self.common_name)
            .field("names", &self.names)
            .field("validity", &self.validity)
            .field("renew_before", &self.renew_before)
            .field("check_every", &self.check_every)
            .field("save_as", &self.save_as)
            .finish_non_exhaustive()
    }
}

/// Whether a certificate expiring at `expires_at` (Unix seconds; `None` when its expiry
/// cannot be read) must be reissued at `now`: when less than `renew_before` is left.
///
/// Pure: the caller reads the clock and the certificate.
pub fn renewal_due(expires_at: Option<i64>, now: i64, renew_before: Duration) -> bool {
    match expires_at {
        Some(exp) => exp.saturating_sub(now) < i64::try_from(renew_before.as_secs()).unwrap_or(i64::MAX),
        None => true,
    }
}

/// One check at `now` (Unix seconds): when [`renewal_due`], issues a new certificate,
/// installs it in `cert` and saves it where `rot.save_as` says. `Ok(true)` when rotated.
/// A failed save is only logged: the new certificate is already in use.
pub fn rotate_if_due(cert: &dyn LiveCert, rot: &CertRotation, now: i64) -> Result<bool, RotationError> {
    let expires_at = certificate_expiry(&cert.cert_pem()).ok().map(|(exp, _)| exp);
    if !renewal_due(expires_at, now, rot.renew_before) {
        return Ok(false);
    }
    let validity = time::Duration::seconds(i64::try_from(rot.validity.as_secs()).unwrap_or(i64::MAX));
    let new = ClusterCa::from_pem(&rot.ca_cert_pem, &rot.ca_key_pem)
        .and_then(|ca| ca.issue_serving_valid_for(&rot.common_name, &rot.names, validity))
        .map_err(RotationError::Issue)?;
    cert.install(&new).map_err(RotationError::Install)?;
    if let Some((dir, name)) = &rot.save_as {
        if let Err(e) = new.save(dir, name) {
            tracing::warn!(purpose = rot.purpose, error = %e, "saving the rotated certificate");
        }
    }
    Ok(true)
}

fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
}

/// Checks `cert` at once and then every `rot.check_every`, rotating it when due, until
/// `shutdown` is cancelled. Failures are logged and retried at the next check.
pub async fn run(cert: Arc<dyn LiveCert>, rot: CertRotation, shutdown: CancellationToken) {
    loop {
        match rotate_if_due(cert.as_ref(), &rot, unix_now()) {
            Ok(true) => tracing::info!(purpose = rot.purpose, "rotated the {} certificate", rot.purpose),
            Ok(false) => {}
            Err(e) => tracing::warn!(purpose = rot.purpose, error = %e, "rotating the {} certificate", rot.purpose),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(rot.check_every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A certificate holder that records what it was given and can refuse it.
    struct Slot {
        current: Mutex<IssuedCert>,
        refuse: bool,
    }

    impl LiveCert for Slot {
        fn cert_pem(&self) -> String {
            self.current.lock().expect("lock").cert_pem.clone()
        }

        fn install(&self, cert: &IssuedCert) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            if self.refuse {
                return Err("refused".into());
            }
            *self.current.lock().expect("lock") = cert.clone();
            Ok(())
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn setup(valid_for: time::Duration, refuse: bool) -> (ClusterCa, Arc<Slot>, CertRotation) {
        let ca = ClusterCa::generate("t").expect("CA");
        let first = ca.issue_serving_valid_for("r1", &["127.0.0.1".into()], valid_for).expect("cert");
        let rot = CertRotation {
            purpose: "test",
            ca_cert_pem: ca.cert_pem().to_string(),
            ca_key_pem: ca.key_pem(),
            common_name: "r1".into(),
            names: vec!["127.0.0.1".into(), "localhost".into()],
            validity: 48 * HOUR,
            renew_before: 3 * HOUR,
            check_every: Duration::from_millis(10),
            save_as: None,
        };
        (ca, Arc::new(Slot { current: Mutex::new(first), refuse }), rot)
    }

    #[test]
    fn renewal_is_due_inside_the_window_and_when_the_expiry_is_unknown() {
        let now = 1_000_000;
        assert!(!renewal_due(Some(now + 3 * 3600), now, 2 * HOUR));
        assert!(!renewal_due(Some(now + 2 * 3600), now, 2 * HOUR), "exactly the window left");
        assert!(renewal_due(Some(now + 2 * 3600 - 1), now, 2 * HOUR));
        assert!(renewal_due(Some(now - 10), now, 2 * HOUR), "already expired");
        assert!(renewal_due(None, now, 2 * HOUR));
        // No overflow at the extremes.
        assert!(renewal_due(Some(i64::MIN), i64::MAX, 2 * HOUR));
        assert!(renewal_due(Some(now + 3650 * 86400), now, Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn a_certificate_close_to_expiry_is_replaced_by_a_later_one_of_the_same_names() {
        let (ca, slot, rot) = setup(time::Duration::hours(2), false);
        let before = slot.cert_pem();
        let now = unix_now();
        assert!(rotate_if_due(slot.as_ref(), &rot, now).expect("rotation"));
        let after = slot.cert_pem();
        assert_ne!(before, after);
        let (exp, cn) = certificate_expiry(&after).expect("expiry");
        assert!((exp - now - 48 * 3600).abs() < 5, "{exp}");
        assert_eq!(cn, "r1");
        // The new certificate chains to the CA and carries the configured names.
        let (_, pem) = x509_parser::pem::parse_x509_pem(after.as_bytes()).expect("PEM");
        let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).expect("certificate");
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.cert_pem().as_bytes()).expect("PEM");
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_pem.contents).expect("CA");
        cert.verify_signature(Some(ca_cert.public_key())).expect("signed by the CA");
        let san = cert.subject_alternative_name().expect("SAN").expect("present");
        assert_eq!(san.value.general_names.len(), 2);
        // Now far from expiry: the next check leaves it alone.
        assert!(!rotate_if_due(slot.as_ref(), &rot, now).expect("check"));
        assert_eq!(slot.cert_pem(), after);
    }

    #[test]
    fn a_refused_certificate_leaves_the_old_one_and_a_saved_one_lands_on_disk() {
        let (_, refusing, rot) = setup(time::Duration::hours(2), true);
        let before = refusing.cert_pem();
        assert!(matches!(rotate_if_due(refusing.as_ref(), &rot, unix_now()), Err(RotationError::Install(_))));
        assert_eq!(refusing.cert_pem(), before);

        let dir = tempfile::tempdir().expect("dir");
        let (_, slot, mut rot) = setup(time::Duration::hours(2), false);
        rot.save_as = Some((dir.path().to_path_buf(), "peer".into()));
        assert!(rotate_if_due(slot.as_ref(), &rot, unix_now()).expect("rotation"));
        let saved = IssuedCert::load(dir.path(), "peer").expect("read").expect("saved");
        assert_eq!(saved.cert_pem, slot.cert_pem());

        let (_, slot, mut rot) = setup(time::Duration::hours(2), false);
        rot.ca_key_pem = "not a key".into();
        assert!(matches!(rotate_if_due(slot.as_ref(), &rot, unix_now()), Err(RotationError::Issue(_))));
    }

    #[test]
    fn debug_never_shows_the_ca_key() {
        let (_, _, rot) = setup(time::Duration::hours(2), false);
        assert!(!format!("{rot:?}").contains("PRIVATE KEY"));
    }

    #[tokio::test]
    async fn the_task_rotates_a_due_certificate_and_stops_on_shutdown() {
        let (_, slot, rot) = setup(time::Duration::hours(2), false);
        let before = slot.cert_pem();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(slot.clone(), rot, shutdown.clone()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while slot.cert_pem() == before {
            assert!(tokio::time::Instant::now() < deadline, "never rotated");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Rotated once; the new certificate is not due, so it stays.
        let rotated = slot.cert_pem();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(slot.cert_pem(), rotated);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").expect("no panic");
    }
}
