//! Keystone application credentials of clusters: created as the requesting user with their own
//! token (so the cluster acts with that user's roles, `admin` dropped), deleted when no longer
//! needed. The secret is returned once, wrapped in `SecretString`, and never logged.

use secrecy::SecretString;
use serde::Deserialize;
use uuid::Uuid;

use super::call::{OpenStackError, builder_error, query};
use super::session::UserSession;
use openstack_sdk::api::identity::v3::user::application_credential::{
    create as ac_create, delete as ac_delete,
};

const SERVICE: &str = "Keystone";

/// A freshly created application credential.
pub struct AppCredential {
    pub id: String,
    pub name: String,
    pub secret: SecretString,
}

impl std::fmt::Debug for AppCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppCredential")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Created {
    id: String,
    name: String,
    secret: SecretString,
}

/// The name prefix of every credential of `cluster`: `magnum-<uuid>-`.
pub fn name_prefix(cluster: Uuid) -> String {
    format!("magnum-{cluster}-")
}

/// The roles a cluster's credential carries: the caller's, without `admin` (a cluster never
/// needs to administer the cloud, and a leaked credential must not be able to).
pub fn delegated_roles(roles: &[String]) -> Vec<String> {
    let mut out: Vec<String> = roles
        .iter()
        .filter(|r| !r.eq_ignore_ascii_case("admin"))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Creates `magnum-<cluster>-<nonce>` for `user_id` with the caller's token.
pub async fn create(
    session: &UserSession,
    user_id: &str,
    roles: &[String],
    cluster: Uuid,
    cluster_name: &str,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<AppCredential, OpenStackError> {
    let nonce: [u8; 4] = rand::random();
    let name = format!("{}{}", name_prefix(cluster), hex::encode(nonce));
    let roles: Vec<ac_create::Roles<'_>> = delegated_roles(roles)
        .into_iter()
        .map(|r| ac_create::RolesBuilder::default().name(r).build())
        .collect::<Result<_, _>>()
        .map_err(|e| builder_error(SERVICE, e))?;
    let mut cred = ac_create::ApplicationCredentialBuilder::default();
    cred.name(name.clone())
        .description(Some(
            format!("Magnum cluster ({cluster_name}, {cluster})").into(),
        ))
        // A credential with an expiry must be able to create its successor (docs/architecture.md,
        // "Application credential"); one without never needs to.
        .unrestricted(Some(expires_at.is_some()))
        .roles(roles);
    if let Some(t) = expires_at {
        cred.expires_at(Some(t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string().into()));
    }
    let ep = ac_create::Request::builder()
        .user_id(user_id)
        .application_credential(cred.build().map_err(|e| builder_error(SERVICE, e))?)
        .build()
        .map_err(|e| builder_error(SERVICE, e))?;
    let c: Created = query(session, SERVICE, session.timeout(), ep).await?;
    debug_assert_eq!(c.name, name);
    Ok(AppCredential {
        id: c.id,
        name: c.name,
        secret: c.secret,
    })
}

/// Deletes a credential of `user_id` on `client` (the user's own session or the service's);
/// already gone counts as deleted.
pub async fn delete<C>(
    client: &C,
    timeout: std::time::Duration,
    user_id: &str,
    id: &str,
) -> Result<(), OpenStackError>
where
    C: openstack_sdk_core::api::AsyncClient + Sync,
{
    let ep = ac_delete::Request::builder()
        .user_id(user_id)
        .id(id)
        .build()
        .map_err(|e| builder_error(SERVICE, e))?;
    let raw = openstack_sdk_core::api::ignore(ep);
    match tokio::time::timeout(
        timeout,
        openstack_sdk_core::api::QueryAsync::<(), C>::query_async(&raw, client),
    )
    .await
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => match super::call::from_api_error(SERVICE, e) {
            OpenStackError::NotFound(_) => Ok(()),
            other => Err(other),
        },
        Err(_) => Err(OpenStackError::unavailable(SERVICE, "timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_is_never_delegated() {
        let roles = [
            "admin",
            "member",
            "reader",
            "member",
            "load-balancer_member",
        ]
        .map(String::from);
        assert_eq!(
            delegated_roles(&roles),
            ["load-balancer_member", "member", "reader"]
        );
        assert!(name_prefix(Uuid::nil()).starts_with("magnum-00000000-"));
    }
}
