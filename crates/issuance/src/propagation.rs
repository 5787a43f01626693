//! Propagation: a presented TXT value is looked for at every authoritative server before the CA is
//! told the challenge is ready, polled with a bounded wait.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::dns01_error::Dns01Error;
use crate::source::BoxFuture;

/// The default bound on the wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The default time between two rounds of queries.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// Asks one server for the TXT values at a name.
pub trait TxtLookup: Send + Sync + std::fmt::Debug {
    /// The TXT values at `fqdn` on `server` (none: the name has no TXT records there).
    fn txt<'a>(
        &'a self,
        server: SocketAddr,
        fqdn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, String>>;
}

/// Where and how long to look.
#[derive(Debug, Clone)]
pub struct Propagation {
    /// The servers that must all have the value.
    pub servers: Vec<SocketAddr>,
    /// The bound on the wait, from the record's presentation.
    pub timeout: Duration,
    /// The time between two rounds.
    pub interval: Duration,
    /// How a server is asked.
    pub lookup: Arc<dyn TxtLookup>,
}

impl Propagation {
    /// Waits until every server returns `value` among the TXT values at `fqdn`: asks the servers
    /// still missing it every `interval`, and fails once `timeout` has passed.
    // r[impl issue.dns01.propagation]
    pub async fn wait(&self, fqdn: &str, value: &str) -> Result<(), Dns01Error> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut missing = self.servers.clone();
        let mut last_error = None;
        loop {
            let mut still = Vec::new();
            for server in missing {
                // One query never outlasts the wait.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match tokio::time::timeout(left, self.lookup.txt(server, fqdn)).await {
                    Ok(Ok(values)) if values.iter().any(|v| v == value) => {}
                    Ok(Ok(_)) => still.push(server),
                    Ok(Err(e)) => {
                        last_error = Some(format!("{server}: {e}"));
                        still.push(server);
                    }
                    Err(_) => still.push(server),
                }
            }
            if still.is_empty() {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(Dns01Error::NotPropagated {
                    name: fqdn.to_owned(),
                    missing: still.iter().map(ToString::to_string).collect(),
                    waited: self.timeout,
                    last_error,
                });
            }
            tokio::time::sleep_until((now + self.interval).min(deadline)).await;
            missing = still;
        }
    }
}

/// [`TxtLookup`] through hickory-net's client over UDP.
#[derive(Debug, Clone)]
pub struct HickoryLookup {
    /// How long one query may take.
    pub timeout: Duration,
}

impl Default for HickoryLookup {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
        }
    }
}

impl TxtLookup for HickoryLookup {
    fn txt<'a>(
        &'a self,
        server: SocketAddr,
        fqdn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, String>> {
        Box::pin(async move {
            let mut name = Name::from_ascii(fqdn).map_err(|e| e.to_string())?;
            name.set_fqdn(true);
            // Non-recursive: the server's own data, not what it could find out.
            let mut query = Message::query();
            query.metadata.id = rand::random();
            query.metadata.recursion_desired = false;
            query.add_query(Query::query(name.clone(), RecordType::TXT));
            let request = query.to_vec().map_err(|e| e.to_string())?;
            let answer = tokio::time::timeout(
                self.timeout,
                crate::dns_udp::exchange(server, &request, query.metadata.id),
            )
            .await
            .map_err(|_| format!("no answer within {:?}", self.timeout))?
            .map_err(|e| e.to_string())?;
            txt_values(&name, &answer.message)
        })
    }
}

/// The TXT values an answer gives for `name`: it must be authoritative and NOERROR (NXDOMAIN:
/// none yet); any other RCODE, and a CNAME at the name, are errors.
// r[impl issue.dns01.propagation]
fn txt_values(name: &Name, response: &Message) -> Result<Vec<String>, String> {
    let rcode = response.metadata.response_code;
    if rcode == ResponseCode::NXDomain && response.metadata.authoritative {
        return Ok(Vec::new());
    }
    if rcode != ResponseCode::NoError {
        return Err(format!(
            "answered {} ({rcode})",
            format!("{rcode:?}").to_ascii_uppercase()
        ));
    }
    if !response.metadata.authoritative {
        return Err(format!("is not authoritative for {name}"));
    }
    if let Some(target) = response.answers.iter().find_map(|r| match &r.data {
        RData::CNAME(target) if r.name == *name => Some(target.0.to_string()),
        _ => None,
    }) {
        return Err(format!(
            "{name} is a CNAME to {target}: point the provider at that zone"
        ));
    }
    Ok(response
        .answers
        .iter()
        .filter(|r| r.name == *name)
        .filter_map(|r| match &r.data {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .iter()
                    .map(|part| String::from_utf8_lossy(part))
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Servers that get the value at a set time after the start, and count the queries.
    #[derive(Debug)]
    struct Delayed {
        start: tokio::time::Instant,
        appears_after: HashMap<SocketAddr, Duration>,
        queries: Mutex<Vec<(SocketAddr, Duration)>>,
    }

    impl TxtLookup for Delayed {
        fn txt<'a>(
            &'a self,
            server: SocketAddr,
            _fqdn: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, String>> {
            let at = self.start.elapsed();
            self.queries.lock().unwrap().push((server, at));
            let values = match self.appears_after.get(&server) {
                Some(after) if at >= *after => vec!["other".into(), "want".into()],
                Some(_) => vec!["other".into()],
                None => return Box::pin(async { Err("refused".to_owned()) }),
            };
            Box::pin(async move { Ok(values) })
        }
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn propagation(lookup: Arc<Delayed>) -> Propagation {
        Propagation {
            servers: vec![addr(1), addr(2)],
            timeout: Duration::from_secs(120),
            interval: Duration::from_secs(2),
            lookup,
        }
    }

    // r[verify issue.dns01.propagation]
    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_every_server_has_the_value_asking_only_the_missing_ones() {
        let lookup = Arc::new(Delayed {
            start: tokio::time::Instant::now(),
            appears_after: [(addr(1), Duration::ZERO), (addr(2), Duration::from_secs(5))].into(),
            queries: Mutex::default(),
        });
        let started = tokio::time::Instant::now();
        propagation(lookup.clone())
            .wait("_acme-challenge.a.test.", "want")
            .await
            .unwrap();
        // Rounds at 0, 2, 4 and 6 s; server 2 has it from 5 s.
        assert_eq!(started.elapsed(), Duration::from_secs(6));
        let queries = lookup.queries.lock().unwrap().clone();
        assert_eq!(
            queries.iter().filter(|q| q.0 == addr(1)).count(),
            1,
            "{queries:?}"
        );
        assert_eq!(
            queries.iter().filter(|q| q.0 == addr(2)).count(),
            4,
            "{queries:?}"
        );
    }

    // r[verify issue.dns01.propagation]
    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_and_names_the_servers_without_the_value() {
        let lookup = Arc::new(Delayed {
            start: tokio::time::Instant::now(),
            appears_after: [(addr(1), Duration::ZERO)].into(),
            queries: Mutex::default(),
        });
        let started = tokio::time::Instant::now();
        let err = propagation(lookup)
            .wait("_acme-challenge.a.test.", "want")
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(120));
        let Dns01Error::NotPropagated {
            missing,
            last_error,
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!(missing, &["127.0.0.1:2".to_owned()]);
        assert!(
            last_error.as_deref().unwrap_or("").contains("refused"),
            "{err}"
        );
        assert!(err.to_string().contains("_acme-challenge.a.test."), "{err}");
    }

    // r[verify issue.dns01.propagation]
    #[test]
    fn only_an_authoritative_answer_counts_and_a_refusal_or_a_cname_is_an_error() {
        use hickory_proto::op::OpCode;
        use hickory_proto::rr::Record;
        use hickory_proto::rr::rdata::{CNAME, TXT};
        let name = Name::from_ascii("_acme-challenge.a.test.").unwrap();
        let answer = |rcode: ResponseCode, aa: bool, records: Vec<Record>| {
            let mut m = Message::response(1, OpCode::Query);
            m.metadata.response_code = rcode;
            m.metadata.authoritative = aa;
            for r in records {
                m.add_answer(r);
            }
            m
        };
        let txt = Record::from_rdata(name.clone(), 60, RData::TXT(TXT::new(vec!["v".into()])));
        assert_eq!(
            txt_values(
                &name,
                &answer(ResponseCode::NoError, true, vec![txt.clone()])
            ),
            Ok(vec!["v".to_owned()])
        );
        assert_eq!(
            txt_values(&name, &answer(ResponseCode::NXDomain, true, vec![])),
            Ok(vec![])
        );
        let refused = txt_values(&name, &answer(ResponseCode::Refused, false, vec![])).unwrap_err();
        assert!(refused.contains("REFUSED"), "{refused}");
        let cached =
            txt_values(&name, &answer(ResponseCode::NoError, false, vec![txt])).unwrap_err();
        assert!(cached.contains("not authoritative"), "{cached}");
        let target = Name::from_ascii("a.dns.test.").unwrap();
        let cname = Record::from_rdata(name.clone(), 60, RData::CNAME(CNAME(target)));
        let err = txt_values(&name, &answer(ResponseCode::NoError, true, vec![cname])).unwrap_err();
        assert!(err.contains("is a CNAME to a.dns.test."), "{err}");
    }

    // r[verify issue.dns01.propagation]
    #[tokio::test]
    async fn the_query_asks_for_no_recursion() {
        use hickory_proto::op::OpCode;
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server = socket.local_addr().unwrap();
        let asked = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let (n, peer) = socket.recv_from(&mut buf).await.unwrap();
            let query = Message::from_vec(&buf[..n]).unwrap();
            let mut response = Message::response(query.metadata.id, OpCode::Query);
            response.metadata.response_code = ResponseCode::NXDomain;
            response.metadata.authoritative = true;
            socket
                .send_to(&response.to_vec().unwrap(), peer)
                .await
                .unwrap();
            query.metadata.recursion_desired
        });
        let values = HickoryLookup::default()
            .txt(server, "_acme-challenge.a.test.")
            .await
            .unwrap();
        assert_eq!(values, Vec::<String>::new());
        assert!(!asked.await.unwrap(), "recursion desired");
    }
}
