//! What to do about the node's network, decided from the daemon's networks of its name. Pure: the
//! shell (`docker::create_node_network`) lists, asks [`settle`], acts and asks again.

/// One network of the node network's name, as the daemon lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub id: String,
    /// The daemon's creation time, RFC 3339 (Go's, with the fraction's trailing zeros cut).
    pub created: String,
    pub driver: String,
    /// Whether it carries `holdfast.network=node`.
    pub labelled: bool,
}

impl Found {
    fn ours(&self) -> bool {
        self.driver == "bridge" && self.labelled
    }
}

/// The next step towards exactly one node network of the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// None exists: create it.
    Create,
    /// Exactly one, ours: join it.
    Use,
    /// Two or more of ours, and the one this start created is not the oldest, or is the oldest
    /// but a newer one stayed (its creator saw only its own and went on with it): remove it.
    Remove(String),
    /// Two or more of ours, the newer ones another creator's that it will remove: ask again soon.
    Wait,
    /// One of that name is someone else's.
    Foreign { id: String, driver: String },
}

/// A sortable form of a daemon timestamp: the seconds as written, the fraction padded to
/// nanoseconds (Go trims trailing zeros, so `.19` must sort before `.2`).
fn created_key(created: &str) -> (&str, String) {
    let secs = created.get(..19).unwrap_or(created);
    let fraction: String = created
        .get(19..)
        .and_then(|rest| rest.strip_prefix('.'))
        .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect())
        .unwrap_or_default();
    (secs, format!("{fraction:0<9}"))
}

// r[impl workload.network.create]
/// Decides from `found` (every network of the name) and `mine` (the id this start created, if
/// it did): the oldest of ours is the one every creator keeps, so two racing creators agree.
/// A network's creation time is taken before the daemon lists it, so a creator may see only its
/// own, go on with it, and leave an older one to appear later: the creator of that older one
/// waits, and once `impatient` (a newer one stayed) removes its own instead.
pub(crate) fn settle(found: &[Found], mine: Option<&str>, impatient: bool) -> Settle {
    if let Some(foreign) = found.iter().find(|f| !f.ours()) {
        return Settle::Foreign {
            id: foreign.id.clone(),
            driver: foreign.driver.clone(),
        };
    }
    let Some(oldest) = found
        .iter()
        .min_by(|a, b| (created_key(&a.created), &a.id).cmp(&(created_key(&b.created), &b.id)))
    else {
        return Settle::Create;
    };
    if found.len() == 1 {
        return Settle::Use;
    }
    match mine {
        Some(mine) if (impatient || mine != oldest.id) && found.iter().any(|f| f.id == mine) => {
            Settle::Remove(mine.to_owned())
        }
        _ => Settle::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(id: &str, created: &str) -> Found {
        Found {
            id: id.into(),
            created: created.into(),
            driver: "bridge".into(),
            labelled: true,
        }
    }

    // r[verify workload.network.create]
    #[test]
    fn none_is_created_one_of_ours_is_used() {
        assert_eq!(settle(&[], None, false), Settle::Create);
        // Removed meanwhile by someone: created again.
        assert_eq!(settle(&[], Some("a"), false), Settle::Create);
        let one = [ours("a", "2026-12-06T11:03:38.1Z")];
        assert_eq!(settle(&one, None, false), Settle::Use);
        assert_eq!(settle(&one, Some("a"), false), Settle::Use);
        // A conflict re-read: the other creator's, ours by driver and label.
        assert_eq!(settle(&one, Some("b"), false), Settle::Use);
    }

    // r[verify workload.network.create]
    #[test]
    fn of_two_racing_creators_the_newer_removes_its_own() {
        // `.19` is before `.2` although it sorts after it as text.
        let two = [
            ours("b", "2026-12-06T11:03:38.2Z"),
            ours("a", "2026-12-06T11:03:38.19Z"),
        ];
        assert_eq!(settle(&two, Some("b"), false), Settle::Remove("b".into()));
        assert_eq!(settle(&two, Some("a"), false), Settle::Wait);
        assert_eq!(settle(&two, None, false), Settle::Wait);
        // One instant: the smaller id is the older, for both creators alike.
        let tie = [
            ours("b", "2026-12-06T11:03:38Z"),
            ours("a", "2026-12-06T11:03:38Z"),
        ];
        assert_eq!(settle(&tie, Some("b"), false), Settle::Remove("b".into()));
        assert_eq!(settle(&tie, Some("a"), false), Settle::Wait);
        // The newer one stayed: its creator went on with it, and the oldest's creator gives way.
        assert_eq!(settle(&two, Some("a"), true), Settle::Remove("a".into()));
        // One that created none never removes one.
        assert_eq!(settle(&two, None, true), Settle::Wait);
        // Once its own is gone, the one left is used.
        assert_eq!(settle(&two[..1], None, true), Settle::Use);
    }

    // r[verify workload.network.create]
    #[test]
    fn someone_elses_network_of_the_name_is_refused() {
        let unlabelled = Found {
            labelled: false,
            ..ours("x", "2026-12-06T11:03:38Z")
        };
        let overlay = Found {
            driver: "overlay".into(),
            ..ours("y", "2026-12-06T11:03:38Z")
        };
        for other in [unlabelled, overlay] {
            let expected = Settle::Foreign {
                id: other.id.clone(),
                driver: other.driver.clone(),
            };
            assert_eq!(settle(std::slice::from_ref(&other), None, false), expected);
            assert_eq!(
                settle(
                    &[ours("a", "2026-12-06T11:03:37Z"), other],
                    Some("a"),
                    false
                ),
                expected
            );
        }
    }

    #[test]
    fn a_timestamp_that_is_not_one_sorts_without_panicking() {
        assert_eq!(created_key(""), ("", "000000000".into()));
        assert_eq!(created_key("é"), ("é", "000000000".into()));
    }
}
