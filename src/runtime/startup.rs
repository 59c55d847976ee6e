//! The start lines of the log, once the configuration has been accepted and the
//! listeners bound: the version and the API server, the effective configuration (never a
//! secret: paths, not the token or the kubeconfig's contents), the policy (loudly when it
//! is the default, which denies Secrets), and warnings about exposure (beyond loopback or
//! a socket open to every user without a token, a short token).

use std::path::Path;

use tracing::{info, warn};

use super::config::{MetricsListen, ServeArgs};
use crate::auth::Token;
use crate::service::policy::AllowList;

/// Logs the start: the version and the API server, the effective configuration (never
/// a secret: paths, not the token or the kubeconfig's contents), the policy, and loud
/// warnings about exposure.
pub async fn log(args: &ServeArgs, policy: &AllowList, token: Option<&Token>) {
    let api_server = api_server(args).await;
    info!(
        version = %env!("CARGO_PKG_VERSION"),
        %api_server,
        kubeconfig = %args.client.kubeconfig.as_deref().map_or("inferred".into(), |p| p.display().to_string()),
        context = %args.client.context.as_deref().unwrap_or("current"),
        "safewrite starting"
    );
    let optional =
        |path: Option<&Path>| path.map_or("none".to_string(), |p| p.display().to_string());
    let metrics_listen = match args.metrics_listen {
        MetricsListen::Off => "off".to_string(),
        MetricsListen::At(addr) => addr.to_string(),
    };
    info!(
        listen = %args.listen,
        unix_socket = %optional(args.unix_socket.as_deref()),
        unix_socket_mode = %args.unix_socket_mode,
        unix_socket_group = %args.unix_socket_group.as_deref().unwrap_or("none"),
        metrics_listen = %metrics_listen,
        token_file = %optional(token.map(Token::path)),
        max_connections = args.max_connections,
        max_in_flight = args.max_in_flight,
        max_request_bytes = args.max_request_bytes,
        max_receiving_bytes = args.max_receiving_bytes,
        receive_timeout = %humantime::format_duration(args.receive_timeout),
        "config: serving"
    );
    info!(
        qps = args.client.qps.unwrap_or(safewrite_client::connect::DEFAULT_QPS),
        burst = args.client.burst.unwrap_or(safewrite_client::connect::DEFAULT_BURST),
        qps_steps_aside_for_apf = args.client.qps.is_none() && args.client.burst.is_none(),
        max_attempts = args.max_attempts,
        backoff = %format!("{}..{}", humantime::format_duration(args.initial_backoff), humantime::format_duration(args.max_backoff)),
        request_timeout = %humantime::format_duration(args.client.request_timeout),
        breaker_failures = args.client.breaker_failures,
        breaker_cooldown = %format!("{}..{}", humantime::format_duration(args.client.breaker_cooldown), humantime::format_duration(args.client.breaker_max_cooldown)),
        retry_budget = %format!("{}%+{}/s", args.retry_budget_percent * 100.0, args.retry_budget_min_per_second),
        field_manager = &*args.field_manager,
        "config: writes"
    );
    if policy.is_default() {
        warn!(
            "no --allow or --policy given: callers may write every kind in every namespace EXCEPT Secrets (core/Secret), which are denied unless a rule names them"
        );
    } else {
        for rule in policy.rules() {
            info!(rule = %rule, from = rule.origin(), "policy allows");
        }
        if policy.rules().is_empty() {
            warn!("the policy allows nothing: every write will be denied");
        }
        if policy.allows_secrets() {
            warn!(
                "the policy allows writing Secrets: their data is in the results callers receive"
            );
        }
    }
    if token.is_none() && !args.listen.ip().is_loopback() {
        warn!(
            listen = %args.listen,
            "LISTENING BEYOND LOOPBACK WITHOUT A TOKEN: anyone who can reach this port may write with the sidecar's credentials (within the policy); set --token-file or listen on 127.0.0.1"
        );
    }
    if token.is_none() && args.unix_socket.is_some() && args.unix_socket_mode.0 & 0o007 != 0 {
        warn!(
            mode = %args.unix_socket_mode,
            "the unix socket is open to every local user and no token is set; use --unix-socket-mode 0660 or --token-file"
        );
    }
    if let Some(token) = token
        && token.len() < 16
    {
        warn!(
            bytes = token.len(),
            "the token is short; use at least 16 random bytes (e.g. 32 hex digits)"
        );
    }
}

/// The URL of the API server, found the way `client::connect` finds it (for the start
/// line only: "unknown" if that fails here).
async fn api_server(args: &ServeArgs) -> String {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: args.client.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.client.kubeconfig {
        Some(path) => match Kubeconfig::read_from(path) {
            Ok(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .ok(),
            Err(_) => None,
        },
        None if args.client.context.is_some() => kube::Config::from_kubeconfig(&options).await.ok(),
        None => kube::Config::infer().await.ok(),
    };
    config.map_or("unknown".into(), |c| c.cluster_url.to_string())
}
