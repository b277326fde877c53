//! Keystone: validates callers' tokens with the service's own credentials (what keystonemiddleware
//! does for Magnum), caches the results, and answers project look-ups.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use http::{HeaderName, HeaderValue};
use moka::Expiry;
use moka::future::Cache;
use openstack_sdk::AsyncOpenStack;
use openstack_sdk::api::identity::v3::auth::token::get as token_get;
use openstack_sdk::api::identity::v3::project::get as project_get;
use openstack_sdk::api::identity::v3::role_assignment::list as assignments_list;
use openstack_sdk::api::identity::v3::user::application_credential::get as ac_get;
use openstack_sdk::api::identity::v3::user::application_credential::list as ac_list;
use openstack_sdk::api::identity::v3::user::get as user_get;
use openstack_sdk::config::{Auth, CloudConfig};
use secrecy::SecretString;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use super::call::{OpenStackError, builder_error, query_found};
use super::catalog::Catalog;
use super::session::UserSession;
use crate::config::{KeystoneConfig, OpenStackConfig};

const SERVICE: &str = "Keystone";

/// Who a validated token speaks for: the request context of contract §8.
#[derive(Debug, Clone)]
pub struct Identity {
    pub user_id: String,
    pub user_name: String,
    pub user_domain_id: String,
    pub user_domain_name: String,
    /// `None` for unscoped, domain- and system-scoped tokens.
    pub project_id: Option<String>,
    pub project_name: Option<String>,
    pub project_domain_id: Option<String>,
    /// Set for domain-scoped tokens.
    pub domain_id: Option<String>,
    /// Role names, implied roles included (Keystone expands them in the token).
    pub roles: Vec<String>,
    /// A system-scoped token (`"system": {"all": true}`): Magnum's rules are project-scoped.
    pub system_scope: bool,
    pub expires_at: DateTime<Utc>,
    pub catalog: Arc<Catalog>,
}

/// The parts of Keystone's token document we read (`GET /v3/auth/tokens` → `token`).
#[derive(Debug, Deserialize)]
struct TokenDoc {
    expires_at: DateTime<Utc>,
    user: Named,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    domain: Option<IdName>,
    #[serde(default)]
    system: Option<serde_json::Value>,
    #[serde(default)]
    roles: Vec<IdName>,
    #[serde(default)]
    catalog: Catalog,
}

#[derive(Debug, Deserialize)]
struct Named {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    domain: Option<IdName>,
}

#[derive(Debug, Default, Deserialize)]
struct IdName {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
}

impl From<TokenDoc> for Identity {
    fn from(t: TokenDoc) -> Self {
        let user_domain = t.user.domain.unwrap_or_default();
        let project = t.project;
        Identity {
            user_id: t.user.id,
            user_name: t.user.name,
            user_domain_id: user_domain.id,
            user_domain_name: user_domain.name,
            project_domain_id: project
                .as_ref()
                .and_then(|p| p.domain.as_ref().map(|d| d.id.clone())),
            project_name: project.as_ref().map(|p| p.name.clone()),
            project_id: project.map(|p| p.id),
            domain_id: t.domain.map(|d| d.id),
            roles: t.roles.into_iter().map(|r| r.name).collect(),
            system_scope: t.system.is_some_and(|s| !s.is_null()),
            expires_at: t.expires_at,
            catalog: Arc::new(t.catalog),
        }
    }
}

/// A cached validation: invalid tokens are remembered too, so a flood of bad tokens does not
/// become a flood of Keystone calls (keystonemiddleware does the same).
#[derive(Debug, Clone)]
enum Cached {
    Valid(Arc<Identity>),
    Invalid,
}

/// Keeps an entry for `token_cache_time`, and never past the token's own expiry.
struct TokenExpiry {
    cache_time: Duration,
}

impl Expiry<[u8; 32], Cached> for TokenExpiry {
    fn expire_after_create(&self, _: &[u8; 32], v: &Cached, _: Instant) -> Option<Duration> {
        Some(match v {
            Cached::Valid(id) => {
                let left = (id.expires_at - Utc::now()).to_std().unwrap_or_default();
                left.min(self.cache_time)
            }
            Cached::Invalid => self.cache_time,
        })
    }
}

/// The Keystone client of this replica. Connects lazily (and again after a failure), so the
/// service starts and serves cached tokens even while Keystone is down.
pub struct Keystone {
    cloud: CloudConfig,
    timeout: Duration,
    session: OnceCell<AsyncOpenStack>,
    cache: Cache<[u8; 32], Cached>,
    /// For calls made with callers' tokens (Glance, Nova, Neutron).
    user_http: reqwest::Client,
    user_timeout: Duration,
    interface: String,
    region: Option<String>,
    www_authenticate: String,
}

impl std::fmt::Debug for Keystone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keystone")
            .field("www_authenticate", &self.www_authenticate)
            .finish_non_exhaustive()
    }
}

impl Keystone {
    /// Builds the client from validated configuration (`[keystone]` active).
    pub fn new(cfg: &KeystoneConfig, os: &OpenStackConfig) -> Result<Self, OpenStackError> {
        // The SDK finds auth plugins by registration; the ones we configure must be linked in
        // (see Cargo.toml: the SDK's own anchors are empty in the published crate).
        std::hint::black_box(&openstack_sdk_auth_password::ANCHOR);
        std::hint::black_box(&openstack_sdk_auth_applicationcredential::ANCHOR);
        let bad = |m: String| OpenStackError::unavailable(SERVICE, m);
        let auth_url = cfg
            .auth_url
            .clone()
            .ok_or_else(|| bad("[keystone] auth_url is not set".into()))?;
        let mut auth = Auth {
            auth_url: Some(auth_url.clone()),
            ..Default::default()
        };
        let auth_type = if let Some(id) = &cfg.application_credential_id {
            auth.application_credential_id = Some(id.clone());
            auth.application_credential_secret = cfg.application_credential_secret.clone();
            "v3applicationcredential"
        } else {
            auth.username = cfg.username.clone();
            auth.password = cfg.password.clone();
            auth.user_domain_name = Some(cfg.user_domain_name.clone());
            auth.project_name = cfg.project_name.clone();
            auth.project_domain_name = Some(cfg.project_domain_name.clone());
            "v3password"
        };
        let cloud = CloudConfig {
            auth: Some(auth),
            auth_type: Some(auth_type.into()),
            interface: Some(cfg.interface.clone()),
            region_name: cfg.region_name.clone(),
            name: Some("magnum-capi".into()),
            cacert: cfg.cafile.as_ref().map(|p| p.display().to_string()),
            verify: Some(!cfg.insecure),
            auth_cache: Some(false),
            ..Default::default()
        };
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(os.timeout_secs))
            .connect_timeout(Duration::from_secs(os.timeout_secs.min(5)))
            .danger_accept_invalid_certs(cfg.insecure);
        if let Some(path) = &cfg.cafile {
            let pem = std::fs::read(path).map_err(|e| {
                bad(format!(
                    "cannot read [keystone] cafile {}: {e}",
                    path.display()
                ))
            })?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| bad(format!("[keystone] cafile {}: {e}", path.display())))?
            {
                http = http.add_root_certificate(cert);
            }
        }
        let user_http = http.build().map_err(|e| bad(format!("HTTP client: {e}")))?;
        let cache = Cache::builder()
            .max_capacity(cfg.token_cache_size)
            .expire_after(TokenExpiry {
                cache_time: Duration::from_secs(cfg.token_cache_time),
            })
            .build();
        Ok(Keystone {
            cloud,
            timeout: Duration::from_secs(cfg.timeout_secs),
            session: OnceCell::new(),
            cache,
            user_http,
            user_timeout: Duration::from_secs(os.timeout_secs),
            interface: cfg.interface.clone(),
            region: cfg.region_name.clone(),
            www_authenticate: cfg.www_authenticate_uri.clone().unwrap_or(auth_url),
        })
    }

    /// Value of `WWW-Authenticate` on 401: `Keystone uri="…"`.
    pub fn www_authenticate(&self) -> String {
        format!("Keystone uri=\"{}\"", self.www_authenticate)
    }

    /// The service's own authenticated session, connecting on first use (and again on the next
    /// call after a failed attempt). The SDK re-authenticates by itself when its token expires.
    async fn service(&self) -> Result<&AsyncOpenStack, OpenStackError> {
        self.session
            .get_or_try_init(|| async {
                let connect = AsyncOpenStack::builder(&self.cloud)
                    .disable_auth_cache(true)
                    .http_timeout(self.timeout)
                    .http_connect_timeout(self.timeout.min(Duration::from_secs(5)))
                    .connect();
                tokio::time::timeout(self.timeout, connect)
                    .await
                    .map_err(|_| OpenStackError::unavailable(SERVICE, "timed out authenticating"))?
                    .map_err(|e| {
                        tracing::error!(error = %e, "cannot authenticate the service user with Keystone");
                        OpenStackError::unavailable(SERVICE, "cannot authenticate the service user")
                    })
            })
            .await
    }

    /// The identity `token` speaks for: from the cache, or validated with Keystone.
    pub async fn validate(&self, token: &str) -> Result<Arc<Identity>, OpenStackError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let hit = self.cache.contains_key(&key);
        crate::telemetry::token_cache(hit);
        let cached = self
            .cache
            .try_get_with(key, self.fetch(token))
            .await
            .map_err(|e| (*e).clone())?;
        match cached {
            Cached::Valid(id) if id.expires_at > Utc::now() => Ok(id),
            _ => Err(OpenStackError::InvalidToken),
        }
    }

    async fn fetch(&self, token: &str) -> Result<Cached, OpenStackError> {
        let mut subject = HeaderValue::from_str(token).map_err(|_| OpenStackError::InvalidToken)?;
        subject.set_sensitive(true);
        let ep = token_get::Request::builder()
            .header(HeaderName::from_static("x-subject-token"), subject)
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let session = self.service().await?;
        let started = Instant::now();
        let answer: Result<Option<TokenDoc>, _> =
            query_found(session, SERVICE, self.timeout, ep).await;
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis(),
            "token validated with Keystone"
        );
        match answer {
            Ok(Some(doc)) => Ok(Cached::Valid(Arc::new(doc.into()))),
            Ok(None) => Ok(Cached::Invalid),
            Err(e) => {
                tracing::warn!(error = %e, "token validation failed");
                Err(e)
            }
        }
    }

    /// Keystone answers its version document at `auth_url` (readiness); its version id.
    pub async fn reachable(&self) -> Result<String, OpenStackError> {
        let url = self
            .cloud
            .auth
            .as_ref()
            .and_then(|a| a.auth_url.clone())
            .unwrap_or_default();
        let resp = self
            .user_http
            .get(&url)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| OpenStackError::unavailable(SERVICE, e.without_url()))?;
        let status = resp.status();
        // The version document answers 200 (one version) or 300 (the version list).
        if !(status.is_success() || status.as_u16() == 300) {
            return Err(OpenStackError::unavailable(
                SERVICE,
                format!("{url} answered {status}"),
            ));
        }
        let doc: serde_json::Value = resp.json().await.unwrap_or_default();
        Ok(doc
            .pointer("/version/id")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("identity")
            .to_string())
    }

    /// `magnum-capi check`: a new token of the service's own credentials (those token
    /// validation uses), validated like a caller's (which the validation session proves too):
    /// `Ok(Ok(what it carries))`, or `Ok(Err(Keystone's message))` when Keystone refuses them.
    pub async fn login(&self) -> Result<Result<Arc<Identity>, String>, OpenStackError> {
        use secrecy::ExposeSecret;
        let auth = self.cloud.auth.clone().unwrap_or_default();
        let issued = match (
            &auth.application_credential_id,
            &auth.application_credential_secret,
        ) {
            (Some(id), Some(secret)) => self.app_credential_token(id, secret).await?,
            _ => {
                let body = serde_json::json!({"auth": {
                    "identity": {"methods": ["password"], "password": {"user": {
                        "name": auth.username, "domain": {"name": auth.user_domain_name},
                        "password": auth.password.as_ref().map(|p| p.expose_secret())}}},
                    "scope": {"project": {"name": auth.project_name,
                        "domain": {"name": auth.project_domain_name}}}}});
                self.issue_token(&body).await?
            }
        };
        match issued {
            Ok(token) => Ok(Ok(self.validate(&token).await?)),
            Err(refused) => Ok(Err(refused)),
        }
    }

    /// The URL of the first of `types` in `catalog` at the configured interface and region.
    pub fn endpoint<'a>(&self, catalog: &'a Catalog, types: &[&str]) -> Option<&'a str> {
        types
            .iter()
            .find_map(|t| catalog.url(t, &self.interface, self.region.as_deref()))
    }

    /// Where endpoints are looked for: `interface` (and `region`).
    pub fn endpoint_scope(&self) -> String {
        match &self.region {
            Some(r) => format!("interface {} in region {r}", self.interface),
            None => format!("interface {}", self.interface),
        }
    }

    /// Whether a project exists (quota creation checks it), asked with the service's credentials.
    pub async fn project_exists(&self, project_id: &str) -> Result<bool, OpenStackError> {
        let ep = project_get::Request::builder()
            .id(project_id)
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let session = self.service().await?;
        let found: Option<serde_json::Value> =
            query_found(session, SERVICE, self.timeout, ep).await?;
        Ok(found.is_some())
    }

    /// Deletes a cluster's application credential with the service's credentials (its owner may
    /// be gone or unable to act); already deleted counts as done.
    pub async fn delete_app_credential(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<(), OpenStackError> {
        let session = self.service().await?;
        super::appcred::delete(session, self.timeout, user_id, id).await
    }

    /// `(id, name)` of every application credential of `user_id`, read with the service's
    /// credentials (the credentials janitor looks for those of clusters that do not exist).
    pub async fn app_credentials_of(
        &self,
        user_id: &str,
    ) -> Result<Vec<(String, String)>, OpenStackError> {
        let session = self.service().await?;
        let ep = ac_list::Request::builder()
            .user_id(user_id)
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let found: Option<Vec<serde_json::Value>> =
            query_found(session, SERVICE, self.timeout, ep).await?;
        Ok(found
            .unwrap_or_default()
            .iter()
            .filter_map(|c| {
                Some((
                    c.get("id")?.as_str()?.to_string(),
                    c.get("name")?.as_str()?.to_string(),
                ))
            })
            .collect())
    }

    /// Whether application credential `id` with `secret` authenticates: `Ok(None)` when it
    /// does, `Ok(Some(Keystone's message))` when Keystone refuses it.
    pub async fn check_app_credential(
        &self,
        id: &str,
        secret: &SecretString,
    ) -> Result<Option<String>, OpenStackError> {
        Ok(self.app_credential_token(id, secret).await?.err())
    }

    /// A token of application credential `id` and what it carries (a credential renewing
    /// itself uses it); refused → `InvalidToken`.
    pub async fn token_for_app_credential(
        &self,
        id: &str,
        secret: &SecretString,
    ) -> Result<(String, Arc<Identity>), OpenStackError> {
        let token = self
            .app_credential_token(id, secret)
            .await?
            .map_err(|_| OpenStackError::InvalidToken)?;
        let identity = self.validate(&token).await?;
        Ok((token, identity))
    }

    /// POST /v3/auth/tokens with an application credential: `Ok(Ok(token))`, or
    /// `Ok(Err(Keystone's message))` when refused.
    async fn app_credential_token(
        &self,
        id: &str,
        secret: &SecretString,
    ) -> Result<Result<String, String>, OpenStackError> {
        use secrecy::ExposeSecret;
        let body = serde_json::json!({"auth": {"identity": {
            "methods": ["application_credential"],
            "application_credential": {"id": id, "secret": secret.expose_secret()}}}});
        self.issue_token(&body).await
    }

    /// A token of the service's own user scoped to project `project_id` (the delete cleanup of
    /// a cluster whose credential is gone, `[capi] cleanup_without_credential = "service"`), and
    /// what it carries. Password authentication only: an application credential is bound to
    /// its own project. Refused (no role on the project) → `Forbidden` with Keystone's message.
    pub async fn service_token_for_project(
        &self,
        project_id: &str,
    ) -> Result<(String, Arc<Identity>), OpenStackError> {
        use secrecy::ExposeSecret;
        let auth = self.cloud.auth.as_ref();
        let (Some(user), Some(password)) = (
            auth.and_then(|a| a.username.clone()),
            auth.and_then(|a| a.password.clone()),
        ) else {
            return Err(OpenStackError::Forbidden(
                "the service authenticates with an application credential, which cannot act \
                 in another project"
                    .into(),
            ));
        };
        let domain = auth
            .and_then(|a| a.user_domain_name.clone())
            .unwrap_or_else(|| "Default".into());
        let body = serde_json::json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"name": domain},
                "password": password.expose_secret()}}},
            "scope": {"project": {"id": project_id}}}});
        let token = self.issue_token(&body).await?.map_err(|msg| {
            OpenStackError::Forbidden(format!(
                "the service user cannot act in project {project_id}: {msg}"
            ))
        })?;
        let identity = self.validate(&token).await?;
        Ok((token, identity))
    }

    /// POST /v3/auth/tokens with `body`: `Ok(Ok(token))`, or `Ok(Err(Keystone's message))` when
    /// refused. One POST with our own HTTP client: the SDK's auth plugins would build and cache
    /// a whole session for it.
    async fn issue_token(
        &self,
        body: &serde_json::Value,
    ) -> Result<Result<String, String>, OpenStackError> {
        let base = self
            .cloud
            .auth
            .as_ref()
            .and_then(|a| a.auth_url.clone())
            .unwrap_or_default();
        let base = base.trim_end_matches('/');
        let url = if base.ends_with("/v3") {
            format!("{base}/auth/tokens?nocatalog")
        } else {
            format!("{base}/v3/auth/tokens?nocatalog")
        };
        let resp = self
            .user_http
            .post(&url)
            .timeout(self.timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| OpenStackError::unavailable(SERVICE, e.without_url()))?;
        let status = resp.status();
        if status.is_success() {
            let token = resp
                .headers()
                .get("x-subject-token")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| OpenStackError::unavailable(SERVICE, "no X-Subject-Token"))?
                .to_string();
            return Ok(Ok(token));
        }
        if status.is_client_error() {
            let doc: serde_json::Value = resp.json().await.unwrap_or_default();
            let msg = doc
                .pointer("/error/message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("authentication refused")
                .trim_end_matches('.')
                .to_string();
            return Ok(Err(format!("Keystone answered {}: {msg}", status.as_u16())));
        }
        Err(OpenStackError::unavailable(
            SERVICE,
            format!("authentication answered {status}"),
        ))
    }

    /// Why a cluster credential of `user_id` on `project_id` may have stopped working, asked
    /// with the service's credentials: the owner deleted or disabled, the credential deleted
    /// (Keystone deletes a user's credentials when they lose a role on the project), or no role
    /// left on the project. `None` when none of these holds.
    pub async fn credential_owner_problem(
        &self,
        user_id: &str,
        project_id: &str,
        app_cred_id: &str,
    ) -> Result<Option<String>, OpenStackError> {
        let session = self.service().await?;
        let ep = user_get::Request::builder()
            .id(user_id)
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let user: Option<serde_json::Value> =
            query_found(session, SERVICE, self.timeout, ep).await?;
        let Some(user) = user else {
            return Ok(Some(format!("its owner (user {user_id}) no longer exists")));
        };
        if user.get("enabled").and_then(serde_json::Value::as_bool) == Some(false) {
            return Ok(Some(format!("its owner (user {user_id}) is disabled")));
        }
        let ep = ac_get::Request::builder()
            .user_id(user_id)
            .id(app_cred_id)
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let cred: Option<serde_json::Value> =
            query_found(session, SERVICE, self.timeout, ep).await?;
        let ep = assignments_list::Request::builder()
            .user_id(user_id)
            .scope_project_id(project_id)
            .effective("true")
            .build()
            .map_err(|e| builder_error(SERVICE, e))?;
        let roles: Vec<serde_json::Value> =
            super::call::query(session, SERVICE, self.timeout, ep).await?;
        if roles.is_empty() {
            return Ok(Some(format!(
                "its owner (user {user_id}) no longer has a role on project {project_id}"
            )));
        }
        if cred.is_none() {
            return Ok(Some(format!(
                "it was deleted in Keystone (its owner, user {user_id}, lost a role it carried or removed it)"
            )));
        }
        if let Some(exp) = cred
            .as_ref()
            .and_then(|c| c.get("expires_at"))
            .and_then(serde_json::Value::as_str)
            && let Ok(t) = chrono::NaiveDateTime::parse_from_str(exp, "%Y-%m-%dT%H:%M:%S%.f")
            && t.and_utc() <= Utc::now()
        {
            return Ok(Some(format!("it expired at {exp}")));
        }
        Ok(None)
    }

    /// A client for the other services, acting with the caller's token and catalog.
    pub fn user_session(&self, token: &str, identity: Arc<Identity>) -> UserSession {
        UserSession::new(
            self.user_http.clone(),
            SecretString::from(token.to_string()),
            identity.catalog.clone(),
            self.interface.clone(),
            self.region.clone(),
            self.user_timeout,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_keystone_token_documents() {
        let doc: TokenDoc = serde_json::from_value(json!({
            "methods": ["password"], "audit_ids": ["x"], "is_domain": false,
            "expires_at": "2099-01-01T00:00:00.000000Z", "issued_at": "2026-11-21T10:00:00.000000Z",
            "user": {"id": "u1", "name": "alice", "domain": {"id": "default", "name": "Default"},
                     "password_expires_at": null},
            "project": {"id": "p1", "name": "alpha", "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": "r1", "name": "member"}, {"id": "r2", "name": "reader"}],
            "catalog": [{"type": "image", "id": "s", "name": "glance", "endpoints": [
                {"id": "e", "interface": "public", "region": "RegionOne", "region_id": "RegionOne",
                 "url": "http://glance"}]}]
        }))
        .unwrap();
        let id = Identity::from(doc);
        assert_eq!(id.user_id, "u1");
        assert_eq!(id.user_domain_name, "Default");
        assert_eq!(id.project_id.as_deref(), Some("p1"));
        assert_eq!(id.project_name.as_deref(), Some("alpha"));
        assert_eq!(id.roles, ["member", "reader"]);
        assert!(!id.system_scope);
        assert_eq!(
            id.catalog.url("image", "public", None),
            Some("http://glance")
        );
    }

    #[test]
    fn system_scope_and_admin() {
        let doc: TokenDoc = serde_json::from_value(json!({
            "expires_at": "2099-01-01T00:00:00Z", "user": {"id": "u", "name": "admin"},
            "system": {"all": true}, "roles": [{"id": "r", "name": "admin"}]
        }))
        .unwrap();
        let id = Identity::from(doc);
        assert!(id.system_scope);
        assert_eq!(id.roles, ["admin"]);
        assert_eq!(id.project_id, None);
    }

    #[test]
    fn cache_never_outlives_the_token() {
        let exp = TokenExpiry {
            cache_time: Duration::from_secs(300),
        };
        let soon = Identity::from(
            serde_json::from_value::<TokenDoc>(json!({
                "expires_at": (Utc::now() + chrono::Duration::seconds(10)).to_rfc3339(),
                "user": {"id": "u"}}))
            .unwrap(),
        );
        let d = exp
            .expire_after_create(&[0; 32], &Cached::Valid(Arc::new(soon)), Instant::now())
            .unwrap();
        assert!(d <= Duration::from_secs(10), "{d:?}");
        let d = exp
            .expire_after_create(&[0; 32], &Cached::Invalid, Instant::now())
            .unwrap();
        assert_eq!(d, Duration::from_secs(300));
    }
}
