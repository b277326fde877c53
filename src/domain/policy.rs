//! Magnum's default policy (contract §8), evaluated in one place from the caller's roles.

use super::error::{DomainError, DomainResult};

/// Who is calling: what the policy and the visibility rules need to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user_id: String,
    pub project_id: String,
    pub roles: Vec<String>,
}

impl Caller {
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.eq_ignore_ascii_case(role))
    }
    /// `context_is_admin = role:admin`; admins see every project.
    pub fn is_admin(&self) -> bool {
        self.has_role("admin")
    }
    fn member_of(&self, project: &str) -> bool {
        (self.has_role("member") || self.has_role("admin")) && self.project_id == project
    }
    fn reader_of(&self, project: &str) -> bool {
        (self.has_role("reader") || self.has_role("member") || self.has_role("admin"))
            && self.project_id == project
    }
}

/// The object a rule is checked against (Magnum's target dict).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub project_id: &'a str,
    pub user_id: &'a str,
}

/// Checks `rule` for `caller` against `target` (the caller's own project and user when `None`).
pub fn enforce(rule: &str, caller: &Caller, target: Option<Target<'_>>) -> DomainResult<()> {
    let t = target.unwrap_or(Target {
        project_id: &caller.project_id,
        user_id: &caller.user_id,
    });
    let admin = caller.is_admin();
    let allowed = match rule {
        r if r.ends_with("_all_projects") => admin,
        "clustertemplate:publish"
        | "quota:create"
        | "quota:update"
        | "quota:delete"
        | "quota:get_all"
        | "magnum-service:get_all" => admin,
        // `project_member` literally: `role:member`, an admin role alone does not qualify.
        "credential:rotate" => caller.has_role("member") && caller.project_id == t.project_id,
        "certificate:get" => {
            admin || (caller.reader_of(t.project_id) && caller.user_id == t.user_id)
        }
        "certificate:create" => {
            admin || (caller.member_of(t.project_id) && caller.user_id == t.user_id)
        }
        "cluster:update_health_status" => admin || caller.member_of(t.project_id),
        r if r.ends_with(":get")
            || r.ends_with(":get_all")
            || r.ends_with(":detail")
            || r == "quota:get"
            || r == "stats:get_all" =>
        {
            admin || caller.reader_of(t.project_id)
        }
        _ => admin || caller.member_of(t.project_id),
    };
    if allowed {
        Ok(())
    } else {
        Err(DomainError::policy(rule))
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
        }
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
}
