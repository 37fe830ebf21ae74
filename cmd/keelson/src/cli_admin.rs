//! `keelson token create` and `keelson certs check`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Create a join token for servers and/or nodes (stored as a bootstrap-token Secret).
    Create(TokenCreateArgs),
}

#[derive(Args)]
pub struct TokenCreateArgs {
    /// Admin kubeconfig (e.g. PKI_DIR/admin.kubeconfig or `keelson up`'s DIR/kubeconfig).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// How long the token is valid, e.g. 30m, 24h, 7d; 0 = no expiry.
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// Who may use it: server, node, or both (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "node")]
    usage: Vec<String>,
}

fn parse_ttl(s: &str) -> anyhow::Result<i64> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().with_context(|| format!("--ttl {s:?}: expected a number with s, m, h or d"))?;
    Ok(n * match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => bail!("--ttl {s:?}: unit must be s, m, h or d"),
    })
}

pub async fn token(cmd: TokenCmd) -> anyhow::Result<()> {
    let TokenCmd::Create(args) = cmd;
    for u in &args.usage {
        if u != "server" && u != "node" {
            bail!("--usage {u:?}: use server and/or node");
        }
    }
    let ttl = parse_ttl(&args.ttl)?;
    let kc = kube::config::Kubeconfig::read_from(&args.kubeconfig).with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let ca_pem = cfg
        .root_cert
        .as_ref()
        .and_then(|certs| certs.first())
        .map(|der| {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64 is ASCII")).collect();
            format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
        })
        .context("the kubeconfig names no certificate authority")?;
    let token = keelson_pki::JoinToken::generate(&ca_pem)?;
    let expiration = (ttl > 0).then(|| {
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(ttl);
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    });
    let usages: Vec<&str> = args.usage.iter().map(String::as_str).collect();
    let secret = keelson_apiserver::join::token_secret(&token.id, &token.secret, expiration.as_deref(), &usages);
    let client = kube::Client::try_from(cfg)?;
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client, "kube-system");
    api.create(&Default::default(), &serde_json::from_value(secret)?).await.context("creating the token Secret")?;
    println!("{token}");
    Ok(())
}

#[derive(Args)]
pub struct CertsCheckArgs {
    /// A server's data directory (its API serving certificate is DATA_DIR/tls/apiserver.crt).
    #[arg(long, default_value = "keelson-data")]
    data_dir: PathBuf,
    /// The cluster PKI directory (default DATA_DIR/pki).
    #[arg(long)]
    pki_dir: Option<PathBuf>,
}

/// Prints every certificate's subject and expiry; fails if one has expired.
pub fn certs_check(args: CertsCheckArgs) -> anyhow::Result<()> {
    let pki = args.pki_dir.unwrap_or_else(|| args.data_dir.join("pki"));
    let files = [pki.join("ca.crt"), pki.join("admin.crt"), args.data_dir.join("tls").join("apiserver.crt")];
    let now = jiff::Timestamp::now().as_second();
    println!("{:<48} {:<28} {:<22} {:>9}", "CERTIFICATE", "SUBJECT", "EXPIRES", "DAYS LEFT");
    let mut expired = 0;
    let mut found = 0;
    for f in files.iter().filter(|f| f.exists()) {
        found += 1;
        let pem = std::fs::read_to_string(f)?;
        let (exp, cn) = keelson_pki::certificate_expiry(&pem).with_context(|| f.display().to_string())?;
        let days = (exp - now) / 86400;
        let when = jiff::Timestamp::from_second(exp).map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string()).unwrap_or_default();
        let note = if exp <= now {
            expired += 1;
            "  EXPIRED"
        } else if days < 30 {
            "  renew soon"
        } else {
            ""
        };
        println!("{:<48} {:<28} {:<22} {:>9}{note}", f.display(), cn, when, days);
    }
    if found == 0 {
        bail!("no certificates under {} or {}", pki.display(), args.data_dir.display());
    }
    if expired > 0 {
        bail!("{expired} certificate(s) expired");
    }
    Ok(())
}
