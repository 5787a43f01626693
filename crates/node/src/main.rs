//! The `holdfast` binary. Exit status: 0 stopped cleanly; 1 could not start or a command failed;
//! 2 usage error; 3 the stop plan cut off or saw a failing stopper; 4 the stop was aborted (a
//! second signal during it, or SIGQUIT).

use std::process::ExitCode;

use clap::Parser;
use holdfast::admin::client::{self, Target};
use holdfast::admin::token;
use holdfast::cli::{CertsAction, Cli, ClientArgs, Command, ForwardCommand, GatewayAction};
use holdfast::config::{Config, DEFAULT_ADMIN_LISTEN, Listen};
use holdfast::{logging, render, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("holdfast: cannot start the runtime: {err}");
            return ExitCode::from(run::EXIT_START_FAILED);
        }
    };
    match cli.command {
        Command::Run {
            config,
            data_dir,
            log_format,
        } => {
            // Before the config is read: a SIGHUP (or any signal the node answers) in that window
            // must not kill it the default way.
            let signals = {
                let _inside = runtime.enter();
                match run::NodeSignals::install() {
                    Ok(signals) => signals,
                    Err(err) => {
                        eprintln!("holdfast: {err}");
                        return ExitCode::from(run::EXIT_START_FAILED);
                    }
                }
            };
            let source = run::ConfigSource {
                path: config,
                data_dir,
            };
            let loaded = match source.load() {
                Ok(loaded) => loaded,
                Err(err) => {
                    eprintln!("{err}");
                    return ExitCode::from(run::EXIT_START_FAILED);
                }
            };
            logging::init(
                log_format.unwrap_or(loaded.config.log.format),
                loaded.config.log.level.get_ref(),
            );
            match runtime.block_on(run::run(loaded, source, signals)) {
                Ok(report) => {
                    let code = run::exit_status(&report);
                    // An aborted plan may leave stoppers running: do not wait for the runtime.
                    if report.aborted {
                        std::process::exit(i32::from(code));
                    }
                    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
                    ExitCode::from(code)
                }
                Err(err) => {
                    tracing::error!("{err}");
                    eprintln!("holdfast: {err}");
                    ExitCode::from(run::EXIT_START_FAILED)
                }
            }
        }
        // i[impl node.check-config]
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("{err}");
                ExitCode::from(run::EXIT_START_FAILED)
            }
        },
        Command::Status(args) => runtime.block_on(get(args, "/v1/status", render::status)),
        Command::Faults(args) => runtime.block_on(get(args, "/v1/faults", render::faults)),
        Command::Modules(args) => runtime.block_on(get(args, "/v1/modules", render::modules)),
        Command::Workloads(args) => runtime.block_on(get(args, "/v1/workloads", render::workloads)),
        Command::Logs {
            name,
            tail,
            follow,
            since,
            client,
        } => runtime.block_on(logs(client, &name, tail, follow, since)),
        Command::Drain { restart, client } => runtime.block_on(drain(client, restart)),
        Command::Reload(args) => runtime.block_on(reload(args)),
        // i[impl node.gateway.cli+2]
        Command::Gateway {
            action: None,
            client,
        } => runtime.block_on(get(client, "/v1/gateway", render::gateway)),
        Command::Gateway {
            action:
                Some(GatewayAction::Push {
                    room,
                    user,
                    text,
                    client,
                }),
            ..
        } => runtime.block_on(gateway_push(client, room, user, text)),
        Command::Gateway {
            action:
                Some(GatewayAction::Token {
                    config_file,
                    user,
                    rooms,
                    ttl,
                }),
            ..
        } => gateway_token(&config_file, &user, rooms, &ttl),
        Command::Forwards(args) => runtime.block_on(get(args, "/v1/forwards", render::forwards)),
        Command::Forward(ForwardCommand::Identity { data_dir, config }) => {
            forward_identity(data_dir, config)
        }
        Command::Forward(ForwardCommand::Udp {
            local,
            to,
            node,
            pin,
            token_file,
            json,
        }) => ExitCode::from(runtime.block_on(holdfast::forward_client::run(
            holdfast::forward_client::UdpArgs {
                local,
                target: to,
                node,
                pin,
                token_file,
                json,
            },
        ))),
        // i[impl node.cli.completions]
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "holdfast", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => man(&dir),
        // i[impl node.version]
        Command::Version { json } => {
            let info = holdfast::version::build_info();
            if json {
                match serde_json::to_string(&info) {
                    Ok(text) => println!("{text}"),
                    Err(err) => {
                        eprintln!("holdfast: {err}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print!("{}", info.text());
            }
            ExitCode::SUCCESS
        }
        // i[impl node.certs.cli]
        Command::Certs {
            action: None,
            client,
        } => runtime.block_on(get(client, "/v1/certs", render::certs)),
        Command::Certs {
            action: Some(CertsAction::Retry { host, client }),
            ..
        } => runtime.block_on(cert_retry(client, host)),
    }
}

struct Resolved {
    target: Target,
    token: Option<token::Token>,
}

fn resolve(args: &ClientArgs) -> Result<Resolved, String> {
    let config = match &args.config {
        Some(path) => Some(Config::load(path).map_err(|e| e.to_string())?),
        None => None,
    };
    let target = match (&args.admin, &config) {
        (Some(target), _) => target.clone(),
        (None, Some(config)) => match (&config.admin.socket, config.admin.listen.get_ref()) {
            (Some(socket), _) => Target::Unix(socket.clone()),
            (None, Listen::Tcp(addr)) => Target::Tcp(*addr),
            (None, Listen::Off) => Target::Tcp(DEFAULT_ADMIN_LISTEN),
        },
        (None, None) => Target::Tcp(DEFAULT_ADMIN_LISTEN),
    };
    let token_file = args.token_file.clone().or_else(|| {
        config
            .as_ref()
            .and_then(|c| c.admin.token_file.as_ref().map(|t| t.get_ref().clone()))
    });
    let token = match token_file {
        Some(path) => Some(token::read(&path)?),
        None => None,
    };
    Ok(Resolved { target, token })
}

async fn get(args: ClientArgs, path: &str, render: fn(&serde_json::Value) -> String) -> ExitCode {
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    print_answer(
        client::call(&resolved.target, hyper::Method::GET, path, None).await,
        args.json,
        render,
    )
}

// i[impl node.workloads.logs+2]
/// `holdfast logs`: the node's answer printed as it arrives (already one escaped line per line);
/// any failure is one line on stderr and exit 1.
async fn logs(
    args: ClientArgs,
    name: &str,
    tail: Option<u64>,
    follow: bool,
    since: Option<std::time::Duration>,
) -> ExitCode {
    use std::io::Write as _;
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    let mut path = format!(
        "/v1/workloads/{}/logs?follow={follow}",
        percent_encode(name)
    );
    if let Some(tail) = tail {
        path.push_str(&format!("&tail={tail}"));
    }
    if let Some(since) = since {
        path.push_str(&format!("&since={}", since.as_secs().max(1)));
    }
    let mut stdout = std::io::stdout().lock();
    let mut written = Ok(());
    let answer = client::stream_get(&resolved.target, &path, resolved.token.as_ref(), |chunk| {
        // A reader that went away (`holdfast logs -f | head`) ends the command.
        written = stdout.write_all(chunk).and_then(|()| stdout.flush());
        if written.is_err() {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    })
    .await;
    match (answer, written) {
        (Err(err), _) => {
            eprintln!("holdfast: {err}");
            ExitCode::from(1)
        }
        // Its reader closed the pipe: what it wanted was written.
        (Ok(()), Err(err)) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        (Ok(()), Err(err)) => {
            eprintln!("holdfast: cannot write the logs: {err}");
            ExitCode::from(1)
        }
        (Ok(()), Ok(())) => ExitCode::SUCCESS,
    }
}

/// A workload name as one path segment (names are `[a-z0-9-]`, but the CLI takes any text).
fn percent_encode(text: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    const SEGMENT: &percent_encoding::AsciiSet =
        &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// Prints the node's answer: verbatim with `--json`, else rendered; an error or an answer that is
/// not JSON is exit 1.
fn print_answer<E: std::fmt::Display>(
    answer: Result<String, E>,
    json: bool,
    render: impl FnOnce(&serde_json::Value) -> String,
) -> ExitCode {
    let body = match answer {
        Ok(body) => body,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    if json {
        println!("{}", body.trim_end());
        return ExitCode::SUCCESS;
    }
    match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(value) => {
            print!("{}", render(&value));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("holdfast: the node answered something that is not JSON: {err}");
            ExitCode::from(1)
        }
    }
}

/// How long `holdfast reload` waits for the reload's answer (it may drain the gateway): as long
/// as the node gives it, and a little more.
const RELOAD_TIMEOUT: std::time::Duration =
    holdfast::admin::RELOAD_REQUEST_TIMEOUT.saturating_add(std::time::Duration::from_secs(5));

/// `holdfast reload`'s exit status when its answer was lost (the reload may have applied).
const RELOAD_UNKNOWN: u8 = 5;

/// The node's running config generation, if it answers.
async fn config_generation(target: &Target, token: Option<&token::Token>) -> Option<u64> {
    let status = client::call(target, hyper::Method::GET, "/v1/status", token)
        .await
        .ok()?;
    serde_json::from_str::<serde_json::Value>(&status).ok()?["config"]["generation"].as_u64()
}

/// Says that a reload's answer was lost, and what the node's config generation tells.
async fn reload_unknown(
    target: &Target,
    token: Option<&token::Token>,
    before: Option<u64>,
    why: &str,
) -> ExitCode {
    let after = config_generation(target, token).await;
    let told = match (before, after) {
        (Some(before), Some(after)) if after > before => {
            format!("the config generation went from {before} to {after}: a reload applied")
        }
        (Some(before), Some(after)) => {
            format!("the config generation is still {after} (was {before}): no reload applied yet")
        }
        _ => "the node's config generation could not be read".to_owned(),
    };
    eprintln!("holdfast: the reload's outcome is unknown ({why}); {told}; see `holdfast status`");
    ExitCode::from(RELOAD_UNKNOWN)
}

// i[impl node.cli.reload]
async fn reload(args: ClientArgs) -> ExitCode {
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    let before = config_generation(&resolved.target, resolved.token.as_ref()).await;
    let answer = client::call_within(
        &resolved.target,
        hyper::Method::POST,
        "/v1/reload",
        resolved.token.as_ref(),
        RELOAD_TIMEOUT,
    )
    .await;
    let body = match answer {
        Ok(body) => body,
        Err(client::ClientError::Refused { status: 408, .. }) => {
            let status = 408;
            let why = format!("the node answered {status}");
            return reload_unknown(&resolved.target, resolved.token.as_ref(), before, &why).await;
        }
        Err(err @ (client::ClientError::Timeout { .. } | client::ClientError::Http { .. })) => {
            let why = err.to_string();
            return reload_unknown(&resolved.target, resolved.token.as_ref(), before, &why).await;
        }
        Err(client::ClientError::Refused { body, status, .. }) => {
            // The node's own reason (the config's FILE:LINE:COL line) rather than the envelope.
            let error = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("the node answered {status}: {}", body.trim_end()));
            if args.json {
                println!("{}", body.trim_end());
            }
            eprintln!("holdfast: reload not applied: {error}");
            return ExitCode::from(1);
        }
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    let value: serde_json::Value = match serde_json::from_str(&body) {
        Ok(value) => value,
        Err(err) => {
            eprintln!("holdfast: the node answered something that is not JSON: {err}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        println!("{}", body.trim_end());
    } else {
        print!("{}", render::reload(&value));
    }
    let needs_restart = value["needs_restart"]
        .as_array()
        .is_some_and(|sections| !sections.is_empty());
    let failed = value["failed"]
        .as_object()
        .is_some_and(|failed| !failed.is_empty());
    ExitCode::from(if failed {
        4
    } else if needs_restart {
        3
    } else {
        0
    })
}

// r[impl node.gateway.stop-reason+2]
async fn drain(args: ClientArgs, restart: bool) -> ExitCode {
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    let reason = if restart { "restart" } else { "shutdown" };
    match client::call_json(
        &resolved.target,
        hyper::Method::POST,
        "/v1/drain",
        resolved.token.as_ref(),
        &serde_json::json!({ "reason": reason }),
    )
    .await
    {
        Ok(body) => {
            if args.json {
                println!("{}", body.trim_end());
            } else {
                println!("draining ({reason}): the node stops within its stop budget");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("holdfast: {err}");
            ExitCode::from(1)
        }
    }
}

// i[impl node.gateway.token]
fn gateway_token(
    file: &std::path::Path,
    user: &str,
    rooms: Option<Vec<String>>,
    ttl: &str,
) -> ExitCode {
    let minted = (|| {
        let ttl = holdfast::duration::parse(ttl).map_err(|e| format!("--ttl: {e}"))?;
        let config = Config::load(file).map_err(|e| e.to_string())?;
        let section = config
            .gateway
            .ok_or_else(|| format!("{}: no [gateway] section", file.display()))?;
        holdfast::config::mint_token(
            section.get_ref(),
            user,
            rooms,
            ttl,
            std::time::SystemTime::now(),
        )
    })();
    match minted {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("holdfast: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn gateway_push(
    args: ClientArgs,
    room: Option<String>,
    user: Option<String>,
    text: String,
) -> ExitCode {
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    let (body, to) = match (room, user) {
        (Some(room), _) => (
            serde_json::json!({ "room": room, "text": text }),
            format!("room {room}"),
        ),
        (None, Some(user)) => (
            serde_json::json!({ "user": user, "text": text }),
            format!("user {user}"),
        ),
        // clap requires one of them.
        (None, None) => {
            eprintln!("holdfast: give --room or --user");
            return ExitCode::from(2);
        }
    };
    let answer = client::call_json(
        &resolved.target,
        hyper::Method::POST,
        "/v1/gateway/push",
        resolved.token.as_ref(),
        &body,
    )
    .await;
    print_answer(answer, args.json, |v| render::delivery(&to, v))
}

async fn cert_retry(args: ClientArgs, host: String) -> ExitCode {
    let resolved = match resolve(&args) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return ExitCode::from(1);
        }
    };
    // A hostname is a path segment: refuse what would change the path rather than escape it.
    if host.is_empty() || host.contains(['/', '?', '#', '%', ' ']) {
        eprintln!("holdfast: invalid hostname {host:?}");
        return ExitCode::from(2);
    }
    match client::call(
        &resolved.target,
        hyper::Method::POST,
        &format!("/v1/certs/{host}/retry"),
        resolved.token.as_ref(),
    )
    .await
    {
        Ok(body) => {
            if args.json {
                println!("{}", body.trim_end());
            } else {
                println!(
                    "{host}: block cleared and failure streak reset; the next tick attempts it"
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("holdfast: {err}");
            ExitCode::from(1)
        }
    }
}

// i[impl node.cli.man]
/// Writes holdfast.1 and one page a subcommand into `dir`, and prints their paths.
fn man(dir: &std::path::Path) -> ExitCode {
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), dir)?;
        let mut pages: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "1")
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("holdfast"))
            })
            .collect();
        pages.sort();
        Ok(pages)
    });
    match written {
        Ok(pages) => {
            for page in pages {
                println!("{}", page.display());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("holdfast: man pages in {}: {err}", dir.display());
            ExitCode::from(1)
        }
    }
}

// i[impl node.forward.identity]
fn forward_identity(
    data_dir: Option<std::path::PathBuf>,
    config: Option<std::path::PathBuf>,
) -> ExitCode {
    let data_dir = match (data_dir, config) {
        (Some(dir), _) => dir,
        (None, Some(path)) => match Config::load(&path) {
            Ok(config) => config.node.data_dir,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::from(1);
            }
        },
        (None, None) => match Config::embedded() {
            Ok(config) => config.node.data_dir,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::from(1);
            }
        },
    };
    let dir = holdfast::modules::forward::identity_dir(&data_dir);
    match holdfast_forward::Identity::load_or_create(&dir) {
        Ok(identity) => {
            println!("{}", identity.fingerprint());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("holdfast: forward identity in {}: {err}", dir.display());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_workload_name_is_one_path_segment() {
        assert_eq!(super::percent_encode("web-1_x.y"), "web-1_x.y");
        assert_eq!(super::percent_encode("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }
}
