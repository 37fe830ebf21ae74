use super::*;

fn seen(holder: &str, rv: &str, secs: u64, at: Instant) -> Observation {
    Observation { resource_version: rv.into(), holder: holder.into(), duration: Duration::from_secs(secs), seen_at: at }
}

#[test]
fn absent_lease_is_created() {
    assert_eq!(decide("me", None, Instant::now(), false), Attempt::Create);
}

#[test]
fn another_holders_lease_is_valid_for_its_duration_by_our_clock() {
    let t0 = Instant::now();
    let o = seen("other", "5", 15, t0);
    let until = t0 + Duration::from_secs(15);
    assert_eq!(decide("me", Some(&o), t0 + Duration::from_secs(14), false), Attempt::HeldBy { holder: "other".into(), until });
    assert_eq!(decide("me", Some(&o), t0 + Duration::from_secs(15), false), Attempt::Claim { takeover: true });
}

#[test]
fn a_released_lease_is_taken_at_once() {
    let t0 = Instant::now();
    assert_eq!(decide("me", Some(&seen("", "9", 1, t0)), t0, false), Attempt::Claim { takeover: true });
}

#[test]
fn our_own_lease_is_renewed_or_reacquired_when_the_token_is_unknown() {
    let t0 = Instant::now();
    let o = seen("me", "5", 15, t0);
    assert_eq!(decide("me", Some(&o), t0, true), Attempt::Claim { takeover: false });
    assert_eq!(decide("me", Some(&o), t0, false), Attempt::Reacquire);
}

fn lease(holder: &str, rv: &str, secs: i32) -> Lease {
    Lease {
        metadata: ObjectMeta { resource_version: Some(rv.into()), ..Default::default() },
        spec: Some(LeaseSpec { holder_identity: Some(holder.into()), lease_duration_seconds: Some(secs), ..Default::default() }),
    }
}

#[test]
fn the_clock_restarts_only_when_the_record_changes() {
    let t0 = Instant::now();
    let d = Duration::from_secs(15);
    let first = Observation::after_read(None, &lease("other", "5", 15), t0, d);
    assert_eq!(first.seen_at, t0);
    // Same resourceVersion read later: still observed at t0, so it expires at t0 + 15 s.
    let again = Observation::after_read(Some(&first), &lease("other", "5", 15), t0 + Duration::from_secs(10), d);
    assert_eq!(again.seen_at, t0);
    // Renewed (new resourceVersion): observed anew, with the record's own duration.
    let renewed = Observation::after_read(Some(&again), &lease("other", "6", 40), t0 + Duration::from_secs(12), d);
    assert_eq!(renewed.seen_at, t0 + Duration::from_secs(12));
    assert_eq!(renewed.duration, Duration::from_secs(40));
}

#[test]
fn timings_follow_client_go_rules() {
    assert!(ElectionTimings::default().validate().is_ok());
    let bad = ElectionTimings { lease_duration: Duration::from_secs(10), renew_deadline: Duration::from_secs(10), retry_period: Duration::from_secs(2) };
    assert!(bad.validate().is_err());
    let bad = ElectionTimings { lease_duration: Duration::from_secs(15), renew_deadline: Duration::from_secs(2), retry_period: Duration::from_secs(2) };
    assert!(bad.validate().is_err());
    let short = ElectionTimings { lease_duration: Duration::from_secs(3), renew_deadline: Duration::from_secs(2), retry_period: Duration::from_millis(500) };
    assert!(short.validate().is_ok());
}

#[test]
fn holder_identities_are_unique_per_start() {
    let a = holder_identity("keelson-1");
    let b = holder_identity("keelson-1");
    assert!(a.starts_with("keelson-1_"));
    assert_ne!(a, b);
}
