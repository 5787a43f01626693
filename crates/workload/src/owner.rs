//! Scoping to one holdfast instance: which labels select the module's containers.

use crate::reconciler::{OWNER_LABEL, WORKLOAD_LABEL};

// r[impl workload.owner]
/// The label filters: every workload container, or only those of `owner`.
pub fn label_filter(owner: Option<&str>) -> Vec<String> {
    let mut labels = vec![WORKLOAD_LABEL.to_owned()];
    if let Some(owner) = owner {
        labels.push(format!("{OWNER_LABEL}={owner}"));
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify workload.owner]
    #[test]
    fn an_owner_narrows_the_list_and_the_events_to_its_label() {
        assert_eq!(label_filter(None), vec!["holdfast.workload".to_owned()]);
        assert_eq!(
            label_filter(Some("node-a")),
            vec![
                "holdfast.workload".to_owned(),
                "holdfast.owner=node-a".to_owned()
            ]
        );
    }
}
