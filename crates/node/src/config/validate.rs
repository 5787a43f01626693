//! Validation: every check beyond serde's types, each refusal located at its `FILE:LINE:COL` and
//! key. Nothing here builds what a module runs with (that is the high layer, `convert`).

use std::path::PathBuf;

use holdfast_retry::Policy;
use serde::Deserialize;
use toml::Spanned;

use super::convert::{
    AllowedHost, MIN_FORWARD_TOKEN_LEN, PolicySection, pull_config, read_forward_tokens,
    short_token,
};
use super::locate::{ConfigError, Locator};
use super::schema::{Config, ForwardSection, Listen, Secret, Workload};

impl Config {
    // i[impl node.config.validate]
    pub(super) fn validate(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        if let Some(id) = &self.node.id {
            if id.get_ref().trim().is_empty() {
                return Err(loc.at(
                    Some(id.span()),
                    "node.id",
                    "must not be empty (remove it to use /etc/machine-id or the hostname)".into(),
                ));
            }
        }
        for (key, d) in [
            ("node.stop_budget", &self.node.stop_budget),
            ("node.tick", &self.node.tick),
        ] {
            if d.get_ref().get().is_zero() {
                return Err(loc.at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
        self.refuse_non_loopback_admin(loc)?;
        self.check_allowed_hosts(loc)?;
        if matches!(self.admin.listen.get_ref(), Listen::Off) && self.admin.socket.is_none() {
            return Err(loc.at(
                Some(self.admin.listen.span()),
                "admin.listen",
                "is \"off\" and no admin.socket is set: the admin API would be unreachable".into(),
            ));
        }
        if let Some(token_file) = &self.admin.token_file {
            if let Err(message) = super::token::check_mode(token_file.get_ref()) {
                return Err(loc.at(Some(token_file.span()), "admin.token_file", message));
            }
        }
        let level = self.log.level.get_ref();
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
            return Err(loc.at(
                Some(self.log.level.span()),
                "log.level",
                format!("invalid filter {level:?}: {e}"),
            ));
        }
        let pull_policy = self.pull.policy_section().build(loc, "pull", 0)?;
        if let Err(e) = pull_config(&pull_policy, self.pull.stall_timeout.get_ref().get(), 0) {
            return Err(loc.at(
                Some(self.pull.stall_timeout.span()),
                "pull.stall_timeout",
                e.to_string(),
            ));
        }
        self.validate_pull_credentials(loc)?;
        self.validate_pull_gc(loc)?;
        self.supervise.policy_section().build(loc, "supervise", 0)?;
        if *self.supervise.crash_loop_threshold.get_ref() == 0 {
            return Err(loc.at(
                Some(self.supervise.crash_loop_threshold.span()),
                "supervise.crash_loop_threshold",
                "must be at least 1".into(),
            ));
        }
        if let Some(issuance) = &self.issuance {
            validate_issuance(loc, issuance)?;
        }
        if let Some(forward) = &self.forward {
            validate_forward(loc, forward)?;
        }
        if let Some(gateway) = &self.gateway {
            let hosts: Vec<String> = self
                .issuance
                .as_ref()
                // Every certificate, by its first name (which names its file in the store).
                .map(|i| {
                    i.get_ref()
                        .planned()
                        .into_iter()
                        .filter_map(|c| c.names.into_iter().next())
                        .collect()
                })
                .unwrap_or_default();
            super::gateway_validate::validate(gateway, &hosts, &|span, key, message| {
                loc.at(span, key, message)
            })?;
            self.refuse_publish_token_equal_to_admin(loc, gateway.get_ref())?;
            if let Some(issuance) = &self.issuance {
                refuse_tls_alpn01_cycle(loc, gateway, issuance.get_ref())?;
            }
        }
        self.validate_workloads(loc)
    }

    // i[impl node.gateway.publish.distinct]
    /// The publish token is not the admin token: a backend that publishes must not be able to
    /// drain the node. Both files were checked already; neither secret appears in the message.
    fn refuse_publish_token_equal_to_admin(
        &self,
        loc: &Locator<'_>,
        gateway: &crate::config::GatewaySection,
    ) -> Result<(), ConfigError> {
        let (Some(publish), Some(admin)) = (&gateway.publish_token_file, &self.admin.token_file)
        else {
            return Ok(());
        };
        let read = super::token::read;
        if let (Ok(p), Ok(a)) = (read(publish.get_ref()), read(admin.get_ref()))
            && a.matches(p.expose())
        {
            return Err(loc.at(
                Some(publish.span()),
                "gateway.publish_token_file",
                format!(
                    "holds the same token as admin.token_file ({}): the publish token must differ from the admin token, which can also drain the node",
                    admin.get_ref().display()
                ),
            ));
        }
        Ok(())
    }

    // i[impl node.admin.host+2]
    /// Each `admin.allowed_hosts` entry a DNS name or an IP address, without a port.
    fn check_allowed_hosts(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        for (i, entry) in self.admin.allowed_hosts.iter().enumerate() {
            if let Err(message) = AllowedHost::parse(entry.get_ref()) {
                return Err(loc.at(
                    Some(entry.span()),
                    &format!("admin.allowed_hosts[{i}]"),
                    message,
                ));
            }
        }
        Ok(())
    }

    // i[impl node.admin.non-loopback]
    /// A TCP admin address beyond loopback only with `admin.allow_non_loopback`.
    fn refuse_non_loopback_admin(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        match self.admin.listen.get_ref() {
            Listen::Tcp(addr) if !addr.ip().is_loopback() && !self.admin.allow_non_loopback => {
                Err(loc.at(
                    Some(self.admin.listen.span()),
                    "admin.listen",
                    format!("{addr} is not a loopback address; set admin.allow_non_loopback = true to expose the admin API beyond this machine"),
                ))
            }
            _ => Ok(()),
        }
    }

    // i[impl node.workloads.certificates.readable]
    /// Why `w`'s container could not read the `key.pem` of one of `certs`, if it could not: the
    /// deploy writes it 0600 owned by the node's user unless told otherwise, which only a
    /// container root that keeps CAP_DAC_OVERRIDE reads. A deploy with an `owner`, or a `group`
    /// with mode 0640, is taken as the operator's choice for this container.
    fn unreadable_key(&self, w: &Workload, certs: &[String]) -> Option<String> {
        let user = w.user.as_ref().map(|u| u.get_ref().clone());
        let no_dac_override = w.cap_drop.as_ref().is_some_and(|caps| {
            caps.get_ref().iter().any(|c| {
                let c = c.to_ascii_uppercase();
                let c = c.strip_prefix("CAP_").unwrap_or(&c);
                c == "ALL" || c == "DAC_OVERRIDE"
            })
        });
        if user.is_none() && !no_dac_override {
            return None;
        }
        let issuance = self.issuance.as_ref()?;
        let planned = issuance.get_ref().planned();
        for name in certs {
            let Some((deploy, _)) = planned
                .iter()
                .find(|c| c.names.first() == Some(name))
                .and_then(|c| c.deploy.as_ref())
            else {
                continue;
            };
            let admitted =
                deploy.owner.is_some() || (deploy.group.is_some() && deploy.mode.0 & 0o040 != 0);
            if admitted {
                continue;
            }
            let who = match &user {
                Some(user) => format!("its user {user:?}"),
                None => "its root without CAP_DAC_OVERRIDE (cap_drop)".to_owned(),
            };
            return Some(format!(
                "the container cannot read certificate {name:?}'s key.pem: the deploy writes it \
                 mode {:04o} owned by the node's user, and {who} is not that user; give the \
                 deploy a `group` and mode = \"0640\" and run the container as user = \
                 \"UID:GID\" with that group (or give the deploy the container's `owner`)",
                deploy.mode.0
            ));
        }
        None
    }

    // i[impl node.config.validate]
    // i[impl node.workloads.config]
    // i[impl node.workloads.shape+2]
    /// Every `[[workload]]` entry: a valid, unique name, an image, and what holdfast-workload
    /// asks of the rest.
    fn validate_workloads(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let mut names = std::collections::HashMap::new();
        for (i, w) in self.workloads.iter().enumerate() {
            let name = w.name.get_ref();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(loc.at(
                    Some(w.name.span()),
                    &format!("workload[{i}].name"),
                    format!("invalid name {name:?}: use letters, digits, '-', '_' and '.'"),
                ));
            }
            if let Some(first) = names.insert(name.clone(), i) {
                return Err(loc.at(
                    Some(w.name.span()),
                    &format!("workload[{i}].name"),
                    format!("duplicate workload name {name:?} (also workload[{first}])"),
                ));
            }
            if w.image.get_ref().trim().is_empty() {
                return Err(loc.at(
                    Some(w.image.span()),
                    &format!("workload[{i}].image"),
                    "must not be empty".into(),
                ));
            }
            self.validate_workload_certificates(loc, i, w)?;
            // holdfast-workload owns what a workload may be; its error names the field.
            let check = || {
                let mut config = w.shaped_config();
                config.validate()?;
                config.load_env_file()
            };
            if let Err(e) = check() {
                let field = e.key.rsplit('.').next().unwrap_or("name");
                return Err(loc.at(
                    Some(w.span_of(field)),
                    &format!("workload[{i}].{field}"),
                    e.message,
                ));
            }
        }
        self.validate_workload_dependencies(loc)
    }

    // i[impl node.workloads.shape+2]
    // r[impl workload.depends-on]
    /// Across entries: dependencies name configured workloads and form no cycle; the error is
    /// placed at the `depends_on` of the workload it names.
    fn validate_workload_dependencies(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let configs: Vec<_> = self.workloads.iter().map(Workload::shaped_config).collect();
        if let Err(e) = holdfast_workload::config::validate_dependencies(&configs) {
            let name = e
                .key
                .strip_prefix("workload[")
                .and_then(|k| k.strip_suffix("].depends_on"))
                .unwrap_or_default();
            let i = self
                .workloads
                .iter()
                .position(|w| w.name.get_ref() == name)
                .unwrap_or(0);
            let span = self.workloads.get(i).map(|w| w.span_of("depends_on"));
            return Err(loc.at(span, &format!("workload[{i}].depends_on"), e.message));
        }
        Ok(())
    }

    // i[impl node.workloads.certificates]
    /// A workload's `certificates` name certificates of `[issuance]` that are deployed and
    /// whose key its user can read.
    fn validate_workload_certificates(
        &self,
        loc: &Locator<'_>,
        i: usize,
        w: &Workload,
    ) -> Result<(), ConfigError> {
        let Some(certs) = &w.certificates else {
            return Ok(());
        };
        let dirs = self.certificate_dirs();
        let key = format!("workload[{i}].certificates");
        for name in certs.get_ref() {
            match dirs.get(name) {
                None => {
                    return Err(loc.at(
                        Some(certs.span()),
                        &key,
                        format!(
                            "{name:?} is no certificate of [issuance] (a hostname's \
                             name or a certificate's first name)"
                        ),
                    ));
                }
                Some(None) => {
                    return Err(loc.at(
                        Some(certs.span()),
                        &key,
                        format!(
                            "certificate {name:?} has no deploy: a workload mounts its \
                             deployed files, whose owner and mode the deploy sets (give \
                             it a `deploy`, or set [issuance.deploy])"
                        ),
                    ));
                }
                Some(Some(_)) => {}
            }
        }
        if let Some(problem) = self.unreadable_key(w, certs.get_ref()) {
            return Err(loc.at(Some(certs.span()), &key, problem));
        }
        Ok(())
    }

    // i[impl node.pull.gc]
    /// The image collection's marks make a policy and its interval is not zero.
    fn validate_pull_gc(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let p = &self.pull;
        if p.gc_interval.get_ref().get().is_zero() {
            return Err(loc.at(
                Some(p.gc_interval.span()),
                "pull.gc_interval",
                "must be longer than zero".into(),
            ));
        }
        let high = *p.gc_high_percent.get_ref();
        let low = *p.gc_low_percent.get_ref();
        if high > 100 {
            return Err(loc.at(
                Some(p.gc_high_percent.span()),
                "pull.gc_high_percent",
                format!("{high} is not a percentage (0 to 100)"),
            ));
        }
        if low >= high {
            return Err(loc.at(
                Some(p.gc_low_percent.span()),
                "pull.gc_low_percent",
                format!("{low} must be below pull.gc_high_percent ({high})"),
            ));
        }
        Ok(())
    }

    // i[impl node.pull.credentials]
    /// `pull.docker_config` exists when set; each `credentials_file` exists and is private.
    fn validate_pull_credentials(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        if let Some(path) = &self.pull.docker_config {
            if !path.get_ref().is_file() {
                return Err(loc.at(
                    Some(path.span()),
                    "pull.docker_config",
                    format!("{} is not a file", path.get_ref().display()),
                ));
            }
        }
        if self.pull.digest_interval.get_ref().get().is_zero() {
            return Err(loc.at(
                Some(self.pull.digest_interval.span()),
                "pull.digest_interval",
                "must be longer than zero".into(),
            ));
        }
        self.validate_pull_auth(loc)?;
        // Credentials are per image: two files for one image would be a silent choice.
        let mut per_image: std::collections::BTreeMap<&str, (usize, &PathBuf)> =
            std::collections::BTreeMap::new();
        for (i, w) in self.workloads.iter().enumerate() {
            if let Some(path) = &w.credentials_file {
                let key = format!("workload[{i}].credentials_file");
                if let Err(message) = holdfast_pull::credentials::check_private(path.get_ref()) {
                    return Err(loc.at(Some(path.span()), &key, message));
                }
                let image = w.image.get_ref().as_str();
                match per_image.get(image) {
                    Some((first, other)) if *other != path.get_ref() => {
                        return Err(loc.at(
                            Some(path.span()),
                            &key,
                            format!(
                                "image {image} already has credentials_file {} (workload[{first}]); \
                                 credentials are per image: use the same file",
                                other.display()
                            ),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        per_image.insert(image, (i, path.get_ref()));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Config {
    // i[impl node.pull.auth]
    /// The node's own load (run, reload): each `[pull.auth."REGISTRY"]` password file owned by
    /// the node's user. Not part of [`Config::validate`]: a client loading this config
    /// (`check-config`, `workloads -c`) runs as another user.
    pub(super) fn validate_pull_auth_owner(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        for (name, auth) in &self.pull.auth {
            let path = auth.password_file.get_ref();
            if let Err(message) = holdfast_pull::check_password_file_owner(path) {
                return Err(loc.at(
                    Some(auth.password_file.span()),
                    &format!("pull.auth.{name:?}.password_file"),
                    message,
                ));
            }
        }
        Ok(())
    }

    // i[impl node.pull.auth]
    /// Each `[pull.auth."REGISTRY"]`: a registry host, named once (after normalising), a user
    /// name, and a password file with mode 0600 or stricter (its owner: the node's own load,
    /// [`Config::validate_pull_auth_owner`]).
    fn validate_pull_auth(&self, loc: &Locator<'_>) -> Result<(), ConfigError> {
        let mut seen: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
        // In file order, so a registry named twice is refused at its second table.
        let mut tables: Vec<_> = self.pull.auth.iter().collect();
        tables.sort_by_key(|(_, auth)| auth.username.span().start);
        for (name, auth) in tables {
            let key = |field: &str| format!("pull.auth.{name:?}.{field}");
            let Some(host) = holdfast_pull::registry_name(name) else {
                return Err(loc.at(
                    Some(auth.username.span()),
                    &key("username"),
                    format!("{name:?} names no registry host"),
                ));
            };
            if let Some(first) = seen.insert(host, name) {
                return Err(loc.at(
                    Some(auth.username.span()),
                    &key("username"),
                    format!(
                        "registry {host} already has credentials in [pull.auth.{first:?}]; \
                         give each registry one table"
                    ),
                ));
            }
            if auth.username.get_ref().trim().is_empty() {
                return Err(loc.at(
                    Some(auth.username.span()),
                    &key("username"),
                    "must not be empty".into(),
                ));
            }
            if let Err(message) = holdfast_pull::check_password_file(auth.password_file.get_ref()) {
                return Err(loc.at(
                    Some(auth.password_file.span()),
                    &key("password_file"),
                    message,
                ));
            }
        }
        Ok(())
    }
}

// r[impl node.issuance.config+2]
/// `[issuance]` beyond its types: a policy that builds, hostnames that holdfast-issuance accepts
/// (DNS names, each listed once) and that are served by a configured source.
// i[impl node.gateway.tls-alpn01-first]
/// The gateway's own `from_issuance` certificate validated over TLS-ALPN-01 on the gateway's port:
/// the gateway cannot start before that file exists and, holding the port, it is the only one that
/// would answer the validation (`r[node.gateway.tls-alpn01]`), so the certificate would never be
/// first issued. Refused at `gateway.tls.from_issuance`, naming the ways out.
fn refuse_tls_alpn01_cycle(
    loc: &Locator<'_>,
    gateway: &Spanned<crate::config::GatewaySection>,
    issuance: &holdfast_issuance::IssuanceConfig,
) -> Result<(), ConfigError> {
    use holdfast_issuance::Challenge;
    use holdfast_issuance::module::SourceKind;
    let g = gateway.get_ref();
    let (Some(tls), Some(acme)) = (&g.tls, &issuance.acme) else {
        return Ok(());
    };
    let Some(host) = &tls.get_ref().from_issuance else {
        return Ok(());
    };
    let port = acme.tls_alpn01_bind.port();
    if !crate::config::holds_tls_alpn01_bind(*g.listen.get_ref(), acme.tls_alpn01_bind) {
        return Ok(());
    }
    let cycle = issuance.planned().into_iter().any(|c| {
        c.names.first() == Some(host)
            && c.source == SourceKind::Acme
            && c.challenge == Challenge::TlsAlpn01
    });
    if !cycle {
        return Ok(());
    }
    Err(loc.at(
        Some(tls.span()),
        "gateway.tls.from_issuance",
        format!(
            "{host:?} is validated over TLS-ALPN-01 on the gateway's own port {port}, which only \
             the gateway would answer, and the gateway cannot start before that certificate \
             exists: give that certificate challenge = \"http-01\" or \"dns-01\", or give the \
             gateway cert and key of its own"
        ),
    ))
}

fn validate_issuance(
    loc: &Locator<'_>,
    section: &Spanned<holdfast_issuance::IssuanceConfig>,
) -> Result<(), ConfigError> {
    use holdfast_issuance::module::{Entry, NamePlace, SourceKind};
    let span = Some(section.span());
    let issuance = section.get_ref();
    if let Err(e) = issuance.policy(0) {
        let text = e.to_string();
        let (key, message) = policy_error_key(&text);
        return Err(loc.at(span, &key, message.to_owned()));
    }
    if let Err((at, e)) = issuance.check_names() {
        return Err(loc.at(
            name_span(loc.text, at, false).or(span),
            &format!("issuance.{}", at.key()),
            e.to_string(),
        ));
    }
    // r[impl issue.deploy]
    if let Err((key, e)) = issuance.check_deploys() {
        return Err(loc.at(span, &format!("issuance.{key}"), e.to_string()));
    }
    // r[impl issue.on-renew]
    if let Err((key, message)) = issuance.check_hooks() {
        return Err(loc.at(span, &format!("issuance.{key}"), message.to_owned()));
    }
    // r[impl issue.dns01.choice]
    if let Err((key, message)) = issuance.check_dns01() {
        let at = challenge_span(loc.text, &key).or(span);
        return Err(loc.at(at, &format!("issuance.{key}"), message));
    }
    // r[impl issue.dns01.rfc2136]
    if let Err((key, message)) = issuance.check_dns01_secret() {
        let at = challenge_span(loc.text, &key).or(span);
        return Err(loc.at(at, &format!("issuance.{key}"), message));
    }
    for cert in issuance.planned() {
        let at = NamePlace {
            entry: cert.entry,
            name: None,
        };
        let key = match cert.entry {
            Entry::Hostname(i) => format!("issuance.hostname[{i}]"),
            Entry::Certificate(i) => format!("issuance.certificate[{i}]"),
        };
        let name = cert.names.first().map_or("", String::as_str);
        let missing = match cert.source {
            SourceKind::Acme if issuance.acme.is_none() => Some("acme"),
            SourceKind::Local if issuance.local.is_none() => Some("local"),
            _ => None,
        };
        if let Some(source) = missing {
            return Err(loc.at(
                name_span(loc.text, at, true).or(span),
                &format!("{key}.source"),
                format!(
                    "{name} uses the {source} source, but there is no [issuance.{source}] section"
                ),
            ));
        }
    }
    Ok(())
}

// r[impl node.issuance.config+2]
// r[impl issue.certificates.names+2]
/// Where `at` is written: a `[[issuance.hostname]]`'s `name`, a `[[issuance.certificate]]`'s
/// `names[j]` (its `names` when `at` names no index), or the entry's `source` when `source` is
/// true. holdfast-issuance's config carries no spans, so the text is read once more for them,
/// only when an entry is refused.
fn name_span(
    text: &str,
    at: holdfast_issuance::module::NamePlace,
    source: bool,
) -> Option<std::ops::Range<usize>> {
    use holdfast_issuance::module::Entry;
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        issuance: Option<Section>,
    }
    #[derive(Deserialize)]
    struct Section {
        #[serde(default)]
        hostname: Vec<HostEntry>,
        #[serde(default)]
        certificate: Vec<CertEntry>,
    }
    #[derive(Deserialize)]
    struct HostEntry {
        name: Option<Spanned<IgnoredAny>>,
        source: Option<Spanned<IgnoredAny>>,
    }
    #[derive(Deserialize)]
    struct CertEntry {
        names: Option<Spanned<Vec<Spanned<IgnoredAny>>>>,
        source: Option<Spanned<IgnoredAny>>,
    }
    let section = toml::from_str::<File>(text).ok()?.issuance?;
    match at.entry {
        Entry::Hostname(i) => {
            let entry = section.hostname.into_iter().nth(i)?;
            let field = if source { entry.source } else { entry.name };
            Some(field?.span())
        }
        Entry::Certificate(i) => {
            let entry = section.certificate.into_iter().nth(i)?;
            if source {
                return Some(entry.source?.span());
            }
            let names = entry.names?;
            let whole = names.span();
            match at.name {
                Some(j) => names.into_inner().into_iter().nth(j).map(|n| n.span()),
                None => Some(whole),
            }
        }
    }
}

// r[impl issue.dns01.choice]
/// Where the `challenge` of `hostname[i].challenge` or `certificate[i].challenge` is written,
/// or the `[issuance.dns01]` key a `dns01.KEY` error names (`None`: not written, or another key).
fn challenge_span(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        issuance: Option<Section>,
    }
    #[derive(Deserialize)]
    struct Section {
        #[serde(default)]
        hostname: Vec<Entry>,
        #[serde(default)]
        certificate: Vec<Entry>,
        dns01: Option<std::collections::BTreeMap<String, Spanned<IgnoredAny>>>,
    }
    #[derive(Deserialize)]
    struct Entry {
        challenge: Option<Spanned<IgnoredAny>>,
    }
    let section = toml::from_str::<File>(text).ok()?.issuance?;
    if let Some(field) = key.strip_prefix("dns01.") {
        return Some(section.dns01?.remove(field)?.span());
    }
    let (list, rest) = key.split_once('[')?;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    let entries = match list {
        "hostname" => section.hostname,
        "certificate" => section.certificate,
        _ => return None,
    };
    Some(entries.into_iter().nth(index)?.challenge?.span())
}

// r[impl node.issuance.config+2]
/// The key and message of an error from holdfast-issuance's policy: it names the key first
/// ("issuance: pacing.base: ..."), when it can; a text that starts with no key is the section's.
fn policy_error_key(text: &str) -> (String, &str) {
    let text = text.strip_prefix("issuance: ").unwrap_or(text);
    match text.split_once(": ") {
        Some((key, message)) if !key.contains(' ') => (format!("issuance.{key}"), message),
        _ => ("issuance".to_owned(), text),
    }
}

// r[impl node.forward.config+3]
/// A part that could never be reached past its whole (a token allowed more connections than the
/// node holds in all) is an error at the part; so is a bound on unauthenticated connections above
/// the attempts the node's endpoint buffers, which would be no bound at all.
// r[impl node.forward.config+3]
fn validate_forward_bound_pairs(
    loc: &Locator<'_>,
    forward: &ForwardSection,
) -> Result<(), ConfigError> {
    let value = |b: &Option<Spanned<usize>>, default| b.as_ref().map_or(default, |b| *b.get_ref());
    let in_all = value(
        &forward.max_connections,
        holdfast_forward::DEFAULT_MAX_AUTHENTICATED,
    );
    let unauthenticated = value(
        &forward.max_unauthenticated,
        holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED,
    );
    let pairs = [
        (
            "forward.max_connections_per_token",
            &forward.max_connections_per_token,
            "forward.max_connections",
            in_all,
        ),
        (
            "forward.max_unauthenticated_per_source",
            &forward.max_unauthenticated_per_source,
            "forward.max_unauthenticated",
            unauthenticated,
        ),
    ];
    for (key, part, whole_key, whole) in pairs {
        if let Some(part) = part.as_ref().filter(|p| *p.get_ref() > whole) {
            return Err(loc.at(
                Some(part.span()),
                key,
                format!(
                    "is {}, more than {whole_key} ({whole}): it could never be reached",
                    part.get_ref()
                ),
            ));
        }
    }
    let most = holdfast_forward::server::MAX_INCOMING;
    if let Some(b) = forward
        .max_unauthenticated
        .as_ref()
        .filter(|b| *b.get_ref() > most)
    {
        return Err(loc.at(
            Some(b.span()),
            "forward.max_unauthenticated",
            format!(
                "is {}, more than the {most} connection attempts the node's endpoint holds",
                b.get_ref()
            ),
        ));
    }
    Ok(())
}

/// `[forward]` beyond its types: allow-lists that parse and are not empty, token files that are
/// safe and readable, at least one credential, a token of its own for each
/// `[[forward.client]]`, and connection bounds of at least 1.
fn validate_forward(
    loc: &Locator<'_>,
    section: &Spanned<ForwardSection>,
) -> Result<(), ConfigError> {
    let forward = section.get_ref();
    for (key, bound) in forward.bounds() {
        if let Some(bound) = bound.filter(|b| *b.get_ref() == 0) {
            return Err(loc.at(
                Some(bound.span()),
                key,
                "must be at least 1 (0 would refuse every client)".into(),
            ));
        }
    }
    validate_forward_bound_pairs(loc, forward)?;
    validate_allow(loc, &forward.allow, "forward.allow")?;
    let mut credentials = count_tokens(loc, &forward.tokens, forward.token_file.as_ref(), None)?;
    for (i, client) in forward.client.iter().enumerate() {
        let key = format!("forward.client[{i}]");
        let entry = client.get_ref();
        validate_allow(loc, &entry.allow, &format!("{key}.allow"))?;
        let tokens = count_tokens(loc, &entry.tokens, entry.token_file.as_ref(), Some(i))?;
        if tokens == 0 {
            return Err(loc.at(
                Some(client.span()),
                &key,
                "has no token: set token_file (a 0600 file, one token a line) or tokens".into(),
            ));
        }
        credentials += tokens;
    }
    if credentials == 0 {
        return Err(loc.at(
            Some(section.span()),
            "forward",
            "no client credentials: set forward.token_file (a 0600 file, one token a line) or \
             forward.tokens"
                .into(),
        ));
    }
    Ok(())
}

/// An allow-list (`key`) that is not empty and parses.
fn validate_allow(
    loc: &Locator<'_>,
    allow: &Spanned<Vec<String>>,
    key: &str,
) -> Result<(), ConfigError> {
    if allow.get_ref().is_empty() {
        return Err(loc.at(
            Some(allow.span()),
            key,
            "is empty: every forward would be refused; list the targets, e.g. \"10.0.0.0/8:53\""
                .into(),
        ));
    }
    if let Err(e) = holdfast_forward::AllowList::parse(allow.get_ref().iter().map(String::as_str)) {
        return Err(loc.at(Some(allow.span()), key, e.to_string()));
    }
    Ok(())
}

/// The tokens of `[forward]` (`client` `None`) or of `[[forward.client]]` entry `client`: inline
/// and from its token file, which must be safe and readable; each at least
/// [`MIN_FORWARD_TOKEN_LEN`] bytes.
fn count_tokens(
    loc: &Locator<'_>,
    tokens: &[Secret],
    token_file: Option<&Spanned<PathBuf>>,
    client: Option<usize>,
) -> Result<usize, ConfigError> {
    let section = client.map_or_else(|| "forward".to_owned(), |i| format!("forward.client[{i}]"));
    if let Some((i, token)) = tokens
        .iter()
        .enumerate()
        .find(|(_, t)| t.expose().len() < MIN_FORWARD_TOKEN_LEN)
    {
        return Err(loc.at(
            forward_token_span(loc.text, client, i),
            &format!("{section}.tokens[{i}]"),
            short_token(token.expose().len()),
        ));
    }
    let mut count = tokens.len();
    if let Some(file) = token_file {
        match read_forward_tokens(file.get_ref()) {
            Ok(tokens) => count += tokens.len(),
            Err(message) => {
                return Err(loc.at(Some(file.span()), &format!("{section}.token_file"), message));
            }
        }
    }
    Ok(count)
}

/// Where inline token `index` of `[forward]` (`client` `None`) or of `[[forward.client]]` entry
/// `client` is written. The section's types keep no span per token (a token is a secret, shown
/// only redacted), so the text is read once more for it, only when a token is refused.
fn forward_token_span(
    text: &str,
    client: Option<usize>,
    index: usize,
) -> Option<std::ops::Range<usize>> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct File {
        forward: Option<Tokens>,
    }
    #[derive(Deserialize)]
    struct Tokens {
        #[serde(default)]
        tokens: Vec<Spanned<IgnoredAny>>,
        #[serde(default)]
        client: Vec<Tokens>,
    }
    let file: File = toml::from_str(text).ok()?;
    let forward = file.forward?;
    let tokens = match client {
        None => forward.tokens,
        Some(i) => forward.client.into_iter().nth(i)?.tokens,
    };
    Some(tokens.into_iter().nth(index)?.span())
}

/// A policy's validation, each refusal at its key.
impl PolicySection<'_> {
    fn build(&self, loc: &Locator<'_>, section: &str, seed: u64) -> Result<Policy, ConfigError> {
        self.builder(seed).build().map_err(|e| {
            let field = match &e {
                holdfast_retry::PolicyError::Zero(field)
                | holdfast_retry::PolicyError::TooLong { field, .. } => field,
                _ => &"cap",
            };
            let span = match *field {
                "base" => self.base.span(),
                "escalate_after" => self.escalate_after.span(),
                _ => self.cap.span(),
            };
            let message = match &e {
                holdfast_retry::PolicyError::BaseAboveCap { .. } => {
                    format!("must not be shorter than {section}.base ({e})")
                }
                _ => e.to_string(),
            };
            loc.at(Some(span), &format!("{section}.{field}"), message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.issuance.config+2]
    // Every error the issuance policy returns today starts with its key, so the fallback is
    // reached through no config: a message whose first ": " follows words, not a key.
    #[test]
    fn an_issuance_policy_error_is_keyed_only_by_a_key() {
        assert_eq!(
            policy_error_key("issuance: pacing.base: must be <= cap (7h > 6h)"),
            (
                "issuance.pacing.base".to_owned(),
                "must be <= cap (7h > 6h)"
            )
        );
        assert_eq!(
            policy_error_key("issuance: the pacing cannot work: base above cap"),
            (
                "issuance".to_owned(),
                "the pacing cannot work: base above cap"
            )
        );
        assert_eq!(
            policy_error_key("issuance: no key here"),
            ("issuance".to_owned(), "no key here")
        );
    }

    // r[verify issue.certificates.names+2]
    // r[verify issue.dns01.choice]
    // r[verify node.issuance.config+2]
    #[test]
    fn a_certificate_name_is_refused_at_file_line_col_and_a_wildcard_says_it_needs_dns01() {
        let base = "[node]\n[issuance]\n[issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
                    [issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n";
        // Two names on one certificate, and a hostname beside it: accepted.
        let ok = format!(
            "{base}[[issuance.hostname]]\nname = \"a.example\"\nsource = \"acme\"\n\
             [[issuance.certificate]]\nnames = [\"b.example\", \"www.b.example\"]\nsource = \"acme\"\n"
        );
        let config = Config::parse("ok.toml", &ok).unwrap();
        assert_eq!(
            config.issuance.unwrap().get_ref().certificates[0]
                .names
                .len(),
            2
        );
        let cases = [
            (
                // A wildcard on an ACME certificate: at the name, saying why.
                "[[issuance.certificate]]\nnames = [\"b.example\", \"*.b.example\"]\nsource = \"acme\"\n",
                "bad.toml:8:23: issuance.certificate[0].names[1]: \"*.b.example\" is a wildcard: \
                 a wildcard needs challenge = \"dns-01\"",
            ),
            (
                "[[issuance.hostname]]\nname = \"*.a.example\"\nsource = \"acme\"\n",
                "bad.toml:8:8: issuance.hostname[0].name: \"*.a.example\" is a wildcard",
            ),
            (
                // A name on two certificates: the error names both.
                "[[issuance.certificate]]\nnames = [\"a.example\", \"www.a.example\"]\nsource = \"acme\"\n\
                 [[issuance.certificate]]\nnames = [\"WWW.a.example\"]\nsource = \"local\"\n",
                "bad.toml:11:10: issuance.certificate[1].names[0]: \"WWW.a.example\" is listed more \
                 than once (also issuance.certificate[0].names[1])",
            ),
            (
                "[[issuance.certificate]]\nnames = []\nsource = \"acme\"\n",
                "bad.toml:8:9: issuance.certificate[0].names: a certificate lists at least one name",
            ),
            (
                "[[issuance.certificate]]\nnames = [\"a/b.example\"]\nsource = \"acme\"\n",
                "bad.toml:8:10: issuance.certificate[0].names[0]: \"a/b.example\" is not a DNS name",
            ),
        ];
        for (entries, want) in cases {
            let err = Config::parse("bad.toml", &format!("{base}{entries}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
        // A wildcard on DNS-01 is accepted; DNS-01 without a provider is refused at `challenge`.
        let dns01 = "[[issuance.certificate]]\nnames = [\"*.b.example\", \"b.example\"]\n\
                     source = \"acme\"\nchallenge = \"dns-01\"\n";
        let err = Config::parse("bad.toml", &format!("{base}{dns01}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "bad.toml:10:13: issuance.certificate[0].challenge: \"dns-01\" needs an \
                 [issuance.dns01] section"
            ),
            "{err}"
        );
        let provider = "[issuance.dns01]\nprovider = \"exec\"\ncommand = [\"/usr/local/bin/dns\"]\n\
                        propagation_servers = [\"192.0.2.53:53\"]\n";
        Config::parse("ok.toml", &format!("{base}{provider}{dns01}")).unwrap();
        // A provider setting that cannot work: at its key.
        let bad = "[issuance.dns01]\nprovider = \"exec\"\ncommand = [\"/usr/local/bin/dns\"]\n\
                   propagation_servers = []\n";
        let err = Config::parse("bad.toml", &format!("{base}{bad}{dns01}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("bad.toml:10:23: issuance.dns01.propagation_servers: is required"),
            "{err}"
        );
        // A certificate whose source has no section: at its `source`.
        let text = "[node]\n[issuance]\n[[issuance.certificate]]\nnames = [\"a.example\"]\n\
                    source = \"local\"\n";
        let err = Config::parse("bad.toml", text).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "bad.toml:5:10: issuance.certificate[0].source: a.example uses the local source, \
                 but there is no [issuance.local] section"
            ),
            "{err}"
        );
    }

    // r[verify issue.dns01.rfc2136]
    #[test]
    fn a_tsig_secret_file_readable_by_others_is_refused_at_its_key_without_its_text() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("tsig.key");
        std::fs::write(&secret, "c2VjcmV0LXNlY3JldA==\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let text = format!(
            "[node]\n[issuance]\n[issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
             [issuance.dns01]\nprovider = \"rfc2136\"\nserver = \"192.0.2.53:53\"\n\
             zone = \"b.example\"\ntsig_key_name = \"holdfast\"\ntsig_secret_file = {:?}\n\
             [[issuance.certificate]]\nnames = [\"*.b.example\"]\nsource = \"acme\"\n\
             challenge = \"dns-01\"\n",
            secret.display().to_string()
        );
        let err = Config::parse("bad.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("bad.toml:10:20: issuance.dns01.tsig_secret_file: "),
            "{err}"
        );
        assert!(err.contains("0644"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        Config::parse("ok.toml", &text).unwrap();
    }

    // i[verify node.workloads.certificates]
    // r[verify workload.certs+2]
    #[test]
    fn a_workloads_certificates_name_deployed_certificates_and_mount_their_directories() {
        let issuance = "[node]\n[issuance]\n[issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n\
                        [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
                        [[issuance.certificate]]\nnames = [\"b.example\", \"www.b.example\"]\n\
                        source = \"local\"\ndeploy = { dir = \"/etc/b\" }\n";
        let workload = |keys: &str| {
            format!("{issuance}[[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n{keys}")
        };
        // Without [issuance.deploy], only b.example has a deploy.
        let text = workload("certificates = [\"b.example\"]\non_cert_renew = \"signal:hup\"\n");
        let config = Config::parse("ok.toml", &text).unwrap();
        let w = config.workloads[0].to_config();
        assert_eq!(
            w.certificates,
            vec![holdfast_workload::CertificateMount {
                name: "b.example".into(),
                dir: "/etc/b".into()
            }]
        );
        assert_eq!(
            w.on_cert_renew,
            Some(holdfast_workload::CertRenew::Signal("HUP".into()))
        );
        let err = |text: &str| Config::parse("bad.toml", text).unwrap_err().to_string();
        let e = err(&workload("certificates = [\"a.example\"]\n"));
        assert!(
            e.starts_with("bad.toml:15:16: workload[0].certificates:") && e.contains("no deploy"),
            "{e}"
        );
        let e = err(&workload("certificates = [\"www.b.example\"]\n"));
        assert!(
            e.starts_with("bad.toml:15:16: workload[0].certificates:")
                && e.contains("no certificate of [issuance]"),
            "{e}"
        );
        let e = err(&workload("on_cert_renew = \"restart\"\n"));
        assert!(
            e.starts_with("bad.toml:15:17: workload[0].on_cert_renew:"),
            "{e}"
        );
        let e = err(&workload(
            "certificates = [\"b.example\"]\non_cert_renew = \"reload\"\n",
        ));
        assert!(
            e.starts_with("bad.toml:16:17: workload[0].on_cert_renew"),
            "{e}"
        );
        // A signal the daemon does not know is refused here, not at the first renewal.
        let e = err(&workload(
            "certificates = [\"b.example\"]\non_cert_renew = \"signal:HUPP\"\n",
        ));
        assert!(
            e.starts_with("bad.toml:16:17: workload[0].on_cert_renew") && e.contains("HUPP"),
            "{e}"
        );
        // With [issuance.deploy], every certificate is deployed in DIR/NAME.
        let shared = workload("certificates = [\"a.example\"]\n").replace(
            "[[workload]]",
            "[issuance.deploy]\ndir = \"/srv/certs\"\n[[workload]]",
        );
        let config = Config::parse("ok.toml", &shared).unwrap();
        assert_eq!(
            config.workloads[0].to_config().certificates[0].dir,
            std::path::PathBuf::from("/srv/certs/a.example")
        );
    }

    // r[verify workload.certs+2]
    #[test]
    fn moving_a_mounted_certificates_deploy_dir_changes_the_containers_spec() {
        let text = |dir: &str| {
            format!(
                "[node]\n[issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:1\" }}\n\
                 [[issuance.certificate]]\nnames = [\"b.example\"]\nsource = \"local\"\n\
                 deploy = {{ dir = \"{dir}\" }}\n[[workload]]\nname = \"web\"\n\
                 image = \"nginx:1\"\ncertificates = [\"b.example\"]\n"
            )
        };
        let hash = |dir: &str| {
            let config = Config::parse("ok.toml", &text(dir)).unwrap();
            let w = config.workloads[0].to_config();
            assert_eq!(w.certificates[0].dir, std::path::PathBuf::from(dir));
            w.spec_hash()
        };
        // A reload that moves the deploy replaces the container, which mounts the new dir.
        assert_ne!(hash("/etc/b"), hash("/etc/c"));
        assert_eq!(hash("/etc/b"), hash("/etc/b"));
    }

    // i[verify node.workloads.certificates.readable]
    #[test]
    fn a_container_that_cannot_read_a_mounted_key_is_refused_at_its_certificates() {
        let issuance = |deploy: &str| {
            format!(
                "[node]\n[issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:1\" }}\n\
                 [[issuance.certificate]]\nnames = [\"b.example\"]\nsource = \"local\"\n\
                 deploy = {{ dir = \"/etc/b\"{deploy} }}\n"
            )
        };
        let workload = |deploy: &str, keys: &str| {
            format!(
                "{}[[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n\
                 certificates = [\"b.example\"]\n{keys}",
                issuance(deploy)
            )
        };
        // Root with its capabilities reads a 0600 key it does not own.
        Config::parse("ok.toml", &workload("", "")).unwrap();
        Config::parse("ok.toml", &workload("", "cap_drop = [\"NET_RAW\"]\n")).unwrap();
        // Another user, or root without DAC_OVERRIDE, does not.
        for keys in [
            "user = \"1000:1000\"\n",
            "cap_drop = [\"ALL\"]\n",
            "cap_drop = [\"dac_override\"]\n",
            "cap_drop = [\"CAP_DAC_OVERRIDE\"]\n",
        ] {
            let e = Config::parse("bad.toml", &workload("", keys))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("bad.toml:12:16: workload[0].certificates:")
                    && e.contains("b.example")
                    && e.contains("0640"),
                "{keys}: {e}"
            );
        }
        // A deploy that gives the key to a group at 0640, or to an owner, admits it.
        let group = ", group = 0, mode = \"0640\"";
        Config::parse("ok.toml", &workload(group, "user = \"1000:0\"\n")).unwrap();
        Config::parse("ok.toml", &workload(group, "cap_drop = [\"ALL\"]\n")).unwrap();
        Config::parse("ok.toml", &workload(", owner = 0", "user = \"0\"\n")).unwrap();
        // A group without the mode that lets it read is not enough.
        let e = Config::parse(
            "bad.toml",
            &workload(", group = 0", "cap_drop = [\"ALL\"]\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("workload[0].certificates"), "{e}");
    }

    // r[verify issue.deploy]
    #[test]
    fn a_deploy_mode_wider_than_allowed_or_an_unknown_owner_is_refused_at_its_key() {
        let base = "[node]\n[issuance]\n[issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n\
                    [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n";
        let ok = format!(
            "{base}[issuance.deploy]\ndir = \"/etc/holdfast/certs\"\nowner = \"root\"\ngroup = 0\n\
             mode = \"0640\"\n"
        );
        let config = Config::parse("ok.toml", &ok).unwrap();
        let deploy = config.issuance.unwrap().get_ref().deploy.clone().unwrap();
        assert_eq!(deploy.mode.0, 0o640);
        for (section, want) in [
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nmode = \"0644\"\n",
                "bad.toml:10:8: issuance.deploy.mode: mode 0644 is wider than 0640",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\ncert_mode = \"0666\"\n",
                "bad.toml:10:13: issuance.deploy.cert_mode: mode 0666 is wider than 0644",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nmode = 640\n",
                "bad.toml:10:8: issuance.deploy.mode: ",
            ),
            (
                "[issuance.deploy]\ndir = \"/etc/c\"\nowner = \"no-such-user-holdfast\"\n",
                "bad.toml:2:1: issuance.deploy.owner: no user \"no-such-user-holdfast\"",
            ),
            (
                "[issuance.deploy]\ndir = \"certs\"\n",
                "bad.toml:2:1: issuance.deploy.dir: certs is not an absolute path",
            ),
        ] {
            let err = Config::parse("bad.toml", &format!("{base}{section}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
    }

    // r[verify issue.on-renew]
    #[test]
    fn an_on_renew_that_cannot_run_is_refused_at_its_key() {
        let base = "[node]\n[issuance]\n";
        let ok = format!(
            "{base}on_renew = [\"/usr/sbin/nginx\", \"-s\", \"reload\"]\non_renew_timeout = \"30s\"\n"
        );
        assert!(Config::parse("ok.toml", &ok).is_ok());
        for (section, want) in [
            (
                "on_renew = \"systemctl reload nginx\"\n",
                "bad.toml:3:12: issuance.on_renew: ",
            ),
            (
                "on_renew = []\n",
                "bad.toml:2:1: issuance.on_renew: names no program",
            ),
            (
                "on_renew_timeout = \"0s\"\n",
                "bad.toml:2:1: issuance.on_renew_timeout: must be more than zero",
            ),
        ] {
            let err = Config::parse("bad.toml", &format!("{base}{section}"))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(want), "{err}\n  wanted: {want}");
        }
    }

    // r[verify issue.certificates]
    #[test]
    fn the_gateway_takes_a_certificate_of_several_names_by_its_first_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("token.key");
        std::fs::write(&key, [7u8; 64]).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let text = |name: &str| {
            format!(
                "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"{}\"\n\
                 [gateway.tls]\nfrom_issuance = \"{name}\"\n\
                 [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
                 [[issuance.certificate]]\nnames = [\"app.example\", \"www.app.example\"]\n\
                 source = \"local\"\n",
                key.display()
            )
        };
        Config::parse("ok.toml", &text("app.example")).unwrap();
        // A further name is not a certificate: its file does not exist.
        let err = Config::parse("bad.toml", &text("www.app.example"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gateway.tls.from_issuance"), "{err}");
    }

    // i[verify node.pull.gc]
    #[test]
    fn image_gc_keys_have_the_kubelets_defaults_and_bad_marks_are_located() {
        let config = Config::parse("t.toml", "[node]\n").unwrap();
        let (policy, interval) = config.image_gc().unwrap();
        assert_eq!(policy, holdfast_pull::GcPolicy::default());
        assert_eq!((policy.high_percent(), policy.low_percent()), (85, 80));
        assert_eq!(policy.grace(), std::time::Duration::from_secs(120));
        assert_eq!(interval, std::time::Duration::from_secs(300));
        let text = "[node]\n[pull]\ngc_high_percent = 90\ngc_low_percent = 70\ngc_grace = \"1h\"\n";
        let (policy, _) = Config::parse("t.toml", text).unwrap().image_gc().unwrap();
        assert_eq!(
            policy,
            holdfast_pull::GcPolicy::new(90, 70, std::time::Duration::from_secs(3600)).unwrap()
        );
        let off = Config::parse("t.toml", "[node]\n[pull]\ngc = false\n").unwrap();
        assert!(off.image_gc().is_none());
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_low_percent = 85\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:18: pull.gc_low_percent: 85 must be below"),
            "{err}"
        );
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_high_percent = 101\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:19: pull.gc_high_percent:"),
            "{err}"
        );
        let err = Config::parse("t.toml", "[node]\n[pull]\ngc_interval = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3:15: pull.gc_interval:"), "{err}");
    }

    // i[verify node.pull.credentials]
    // i[verify node.pull.policy+2]
    #[test]
    fn registry_credentials_are_located_validated_and_reach_the_pull_module() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let docker_config = dir.path().join("config.json");
        std::fs::write(&docker_config, "{}").unwrap();
        let own = dir.path().join("app.json");
        std::fs::write(
            &own,
            r#"{"auths": {"reg.example": {"username": "app", "password": "pw"}}}"#,
        )
        .unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "[node]\n[pull]\ndocker_config = \"{}\"\n[[workload]]\nname = \"app\"\n\
             image = \"reg.example/app:1\"\ncredentials_file = \"{}\"\n",
            docker_config.display(),
            own.display()
        );
        let config = Config::parse("t.toml", &text).unwrap();
        let auth = config.registry_auth();
        assert_eq!(auth.docker_config_path(), Some(docker_config.clone()));
        let found = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(auth.lookup("reg.example/app:1", std::time::Duration::from_secs(5)))
            .unwrap()
            .unwrap();
        assert_eq!(found.username(), Some("app"));
        // Not part of the container's spec: changing the file replaces nothing.
        assert_eq!(
            config.workloads[0].to_config(),
            holdfast_workload::WorkloadConfig::new("app", "reg.example/app:1")
        );
        // Readable by others: located at the value.
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Config::parse("t.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:7:20: workload[0].credentials_file:") && err.contains("0644"),
            "{err}"
        );
        // pull_policy: followed tags reach the pull module; a bad value is located.
        let followed = text.replace(
            "credentials_file",
            "pull_policy = \"digest\"\ncredentials_file",
        );
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
        let checks = Config::parse("t.toml", &followed).unwrap().tag_checks();
        assert_eq!(
            checks.images,
            [("reg.example/app:1".to_owned(), vec!["app".to_owned()])].into()
        );
        assert_eq!(checks.interval, std::time::Duration::from_secs(900));
        assert!(
            !Config::parse("t.toml", &followed).unwrap().workloads[0]
                .to_config()
                .pull_always
        );
        // "always": checked before each start, not followed on the interval.
        let always = text.replace(
            "credentials_file",
            "pull_policy = \"always\"\ncredentials_file",
        );
        let always = Config::parse("t.toml", &always).unwrap();
        assert!(always.tag_checks().images.is_empty());
        assert!(always.workloads[0].to_config().pull_always);
        let bad = text.replace(
            "credentials_file",
            "pull_policy = \"sometimes\"\ncredentials_file",
        );
        let err = Config::parse("t.toml", &bad).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:7:15: workload[0].pull_policy:"),
            "{err}"
        );
        // Two workloads of one image with different files: which one is used would be a
        // silent choice; refused, naming both, at the second.
        let other = dir.path().join("other.json");
        std::fs::copy(&own, &other).unwrap();
        let two = format!(
            "{text}[[workload]]\nname = \"app2\"\nimage = \"reg.example/app:1\"\n\
             credentials_file = \"{}\"\n",
            other.display()
        );
        let err = Config::parse("t.toml", &two).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:11:20: workload[1].credentials_file:")
                && err.contains("workload[0]")
                && err.contains("reg.example/app:1"),
            "{err}"
        );
        // The same file twice is no conflict.
        let same = two.replace(&other.display().to_string(), &own.display().to_string());
        assert!(Config::parse("t.toml", &same).is_ok());
        let zero = text.replace("[[workload]]", "digest_interval = \"0s\"\n[[workload]]");
        let err = Config::parse("t.toml", &zero).unwrap_err().to_string();
        assert!(
            err.contains("pull.digest_interval: must be longer than zero"),
            "{err}"
        );
        // A docker_config that is not there.
        let missing = format!(
            "[node]\n[pull]\ndocker_config = \"{}\"\n",
            dir.path().join("nope.json").display()
        );
        let err = Config::parse("t.toml", &missing).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:3:17: pull.docker_config:") && err.contains("nope.json"),
            "{err}"
        );
    }
}
