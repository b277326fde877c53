//! Authorisation: who the caller is, and the one place rules are enforced. The rules are
//! Magnum's defaults (contract §8) plus any operator overrides, evaluated by `policy_lang`.

use std::sync::OnceLock;

use super::error::{DomainError, DomainResult};
use super::policy_lang::{Credentials, Policy, PolicyError, TargetDict};

/// Who is calling: what the policy and the visibility rules need to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user_id: String,
    pub project_id: String,
    pub roles: Vec<String>,
    /// A system-scoped token: Magnum's rules are all `scope_types=["project"]`, so every rule
    /// denies it (oslo.policy's enforce_scope).
    pub system_scope: bool,
}

impl Caller {
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.eq_ignore_ascii_case(role))
    }
    fn credentials(&self, is_admin: bool) -> Credentials<'_> {
        Credentials {
            user_id: &self.user_id,
            project_id: &self.project_id,
            roles: &self.roles,
            is_admin,
        }
    }
    /// The `context_is_admin` rule (default `role:admin`); admins see every project.
    pub fn is_admin(&self) -> bool {
        !self.system_scope && current().context_is_admin(&self.credentials(false))
    }
}

/// The object a rule is checked against (Magnum's target dict).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub project_id: &'a str,
    pub user_id: &'a str,
}

/// The rule an admin additionally needs to act on another project's object: Magnum names the
/// single-object read `…:get_one_all_projects` and every other one `…:<action>_all_projects`.
pub fn all_projects_rule(rule: &str) -> String {
    match rule.strip_suffix(":get") {
        Some(resource) => format!("{resource}:get_one_all_projects"),
        None => format!("{rule}_all_projects"),
    }
}

static POLICY: OnceLock<Policy> = OnceLock::new();

/// Installs the operator's policy (defaults + overrides) for this process; call once at start-up,
/// before the first request. Later calls are refused (the first policy stays).
pub fn install(policy: Policy) -> Result<(), Policy> {
    POLICY.set(policy)
}

fn current() -> &'static Policy {
    POLICY.get_or_init(Policy::defaults)
}

/// Checks `rule` for `caller` against `target` (the caller's own project and user when `None`).
pub fn enforce(rule: &str, caller: &Caller, target: Option<Target<'_>>) -> DomainResult<()> {
    if caller.system_scope {
        return Err(DomainError::policy(rule));
    }
    let t = target.unwrap_or(Target {
        project_id: &caller.project_id,
        user_id: &caller.user_id,
    });
    let creds = caller.credentials(caller.is_admin());
    let target = TargetDict {
        project_id: t.project_id,
        user_id: t.user_id,
    };
    match current().enforce(rule, &creds, &target) {
        Ok(true) => Ok(()),
        Ok(false) => Err(DomainError::policy(rule)),
        Err(e @ PolicyError::Unknown(_)) => {
            // A rule the code names but the policy lacks is a bug: deny, loudly.
            tracing::error!(error = %e, "policy rule is not defined");
            Err(DomainError::policy(rule))
        }
        Err(e) => {
            tracing::error!(error = %e, "policy evaluation failed");
            Err(DomainError::policy(rule))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(roles: &[&str]) -> Caller {
        Caller {
            user_id: "u".into(),
            project_id: "p".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            system_scope: false,
        }
    }

    #[test]
    fn system_scoped_tokens_are_denied_everything() {
        let mut admin = caller(&["admin", "member", "reader"]);
        admin.system_scope = true;
        assert!(!admin.is_admin());
        let e = enforce("cluster:get_all", &admin, None).unwrap_err();
        assert_eq!(
            e.message(),
            "Policy doesn't allow cluster:get_all to be performed."
        );
    }

    #[test]
    fn readers_read_members_write_admins_do_all() {
        assert!(enforce("cluster:get_all", &caller(&["reader"]), None).is_ok());
        assert!(enforce("cluster:create", &caller(&["reader"]), None).is_err());
        assert!(enforce("cluster:create", &caller(&["member"]), None).is_ok());
        assert!(enforce("magnum-service:get_all", &caller(&["member"]), None).is_err());
        assert!(enforce("magnum-service:get_all", &caller(&["admin"]), None).is_ok());
    }

    #[test]
    fn denial_uses_magnums_message() {
        let e = enforce("magnum-service:get_all", &caller(&["member"]), None).unwrap_err();
        assert_eq!(
            e.message(),
            "Policy doesn't allow magnum-service:get_all to be performed."
        );
    }

    #[test]
    fn credential_rotation_has_no_admin_shortcut() {
        let other = Target {
            project_id: "q",
            user_id: "x",
        };
        assert!(enforce("credential:rotate", &caller(&["admin"]), Some(other)).is_err());
        assert!(enforce("credential:rotate", &caller(&["member"]), None).is_ok());
    }

    #[test]
    fn certificates_belong_to_the_cluster_creator() {
        let other_user = Target {
            project_id: "p",
            user_id: "someone",
        };
        assert!(enforce("certificate:get", &caller(&["member"]), Some(other_user)).is_err());
        assert!(enforce("certificate:get", &caller(&["admin"]), Some(other_user)).is_ok());
    }

    #[test]
    fn every_rule_the_service_names_is_defined() {
        let names: std::collections::BTreeSet<&str> = super::current().rule_names().collect();
        let used = [
            "cluster:create",
            "cluster:get",
            "cluster:get_all",
            "cluster:detail",
            "cluster:update",
            "cluster:delete",
            "cluster:resize",
            "cluster:upgrade",
            "cluster:update_health_status",
            "clustertemplate:create",
            "clustertemplate:get",
            "clustertemplate:get_all",
            "clustertemplate:detail",
            "clustertemplate:update",
            "clustertemplate:delete",
            "clustertemplate:publish",
            "nodegroup:get",
            "nodegroup:get_all",
            "nodegroup:create",
            "nodegroup:update",
            "nodegroup:delete",
            "certificate:get",
            "certificate:create",
            "certificate:rotate_ca",
            "credential:rotate",
            "quota:create",
            "quota:update",
            "quota:delete",
            "quota:get",
            "quota:get_all",
            "stats:get_all",
            "magnum-service:get_all",
        ];
        for rule in used {
            assert!(names.contains(rule), "{rule} is not defined");
        }
        for rule in [
            "cluster:get",
            "cluster:get_all",
            "cluster:detail",
            "cluster:update",
            "cluster:delete",
            "cluster:upgrade",
            "nodegroup:get",
            "nodegroup:get_all",
            "clustertemplate:update",
        ] {
            let wide = all_projects_rule(rule);
            assert!(names.contains(wide.as_str()), "{wide} is not defined");
        }
    }
}
