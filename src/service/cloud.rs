//! Template and cluster input checked against Glance, Nova and Neutron with the caller's token
//! (contract §7, Magnum's `attr_validator`): Magnum's messages and status codes, and the ids the
//! names resolved to.

use super::{Error, Result};
use crate::db::templates::TemplateRow;
use crate::domain::error::DomainError;
use crate::domain::labels::Labels;
use crate::domain::resources::{FlavorSize, Resolved};
use crate::openstack::lookups::{self, Flavor};
use crate::openstack::{OpenStackError, UserSession};

/// OpenStack failures keep Magnum's meaning only where Magnum gives one; the rest (service
/// down, timeouts, missing catalog entries) become 503 where the API maps [`Error::OpenStack`].
fn or_else(e: OpenStackError, forbidden: impl FnOnce() -> DomainError) -> Error {
    match e {
        OpenStackError::Forbidden(_) => forbidden().into(),
        other => other.into(),
    }
}

/// Glance image by id or unique name, which must carry `os_distro`.
pub async fn image(s: &UserSession, ident: &str) -> Result<lookups::Image> {
    let not_found = || DomainError::BadRequest(format!("Image {ident} could not be found."));
    let found = match lookups::images(s, ident).await {
        Ok(v) => v,
        Err(OpenStackError::NotFound(_)) => return Err(not_found().into()),
        Err(e) => {
            return Err(or_else(e, || {
                DomainError::Forbidden(format!("Not authorized for image {ident}."))
            }));
        }
    };
    let img = match <[_; 1]>::try_from(found) {
        Ok([img]) => img,
        Err(v) if v.is_empty() => return Err(not_found().into()),
        Err(_) => {
            return Err(DomainError::Conflict(format!(
                "Multiple images exist with same name '{ident}'. Please use the image ID instead."
            ))
            .into());
        }
    };
    if img.os_distro.as_deref().is_none_or(str::is_empty) {
        return Err(DomainError::BadRequest(format!(
            "Image {ident} doesn't contain os_distro field."
        ))
        .into());
    }
    Ok(img)
}

/// Nova's flavors, fetched once per request and matched by name or id as Magnum does.
pub struct Flavors(Vec<Flavor>);

impl Flavors {
    pub async fn fetch(s: &UserSession) -> Result<Self> {
        Ok(Self(
            lookups::flavors(s)
                .await
                .map_err(|e| or_else(e, DomainError::not_authorized))?,
        ))
    }

    /// The flavor named or numbered `ident`, which must have a root disk when the machines boot
    /// from it (`boot_volume_size` of 0).
    pub fn check(&self, ident: &str, boot_volume_size: i64) -> Result<String> {
        let f = self
            .0
            .iter()
            .find(|f| f.name == ident || f.id == ident)
            .ok_or_else(|| DomainError::BadRequest(format!("Unable to find flavor {ident}.")))?;
        if boot_volume_size <= 0 && f.disk == 0 {
            return Err(DomainError::BadRequest(
                "Flavor with zero root volume size is not supported when boot_volume_size is zero."
                    .into(),
            )
            .into());
        }
        Ok(f.id.clone())
    }

    /// The name of the flavor with id `id` (checked by [`Flavors::check`] before).
    pub fn name(&self, id: &str) -> Option<&str> {
        self.0.iter().find(|f| f.id == id).map(|f| f.name.as_str())
    }

    /// The size of the flavor with id `id` (checked by [`Flavors::check`] before).
    pub fn size(&self, id: &str) -> Option<FlavorSize> {
        self.0.iter().find(|f| f.id == id).map(|f| FlavorSize {
            vcpus: f.vcpus,
            ram_mib: f.ram,
            disk_gib: u64::try_from(f.disk).unwrap_or(0),
        })
    }
}

/// The flavors among `ids` whose extra specs ask for a GPU: read from the list where Nova showed
/// them (microversion 2.61), else asked of `os-extra_specs`. Best effort: extra specs a policy
/// hides (or any other failure) count as "no GPU", and the `gpu_operator_enabled` label remains
/// the way to ask.
async fn gpu_flavors(s: &UserSession, flavors: &Flavors, ids: [&Option<String>; 2]) -> Vec<String> {
    let mut ids: Vec<&String> = ids.into_iter().flatten().collect();
    ids.dedup();
    let listed = |id: &String| {
        flavors
            .0
            .iter()
            .find(|f| f.id == **id)
            .and_then(|f| f.extra_specs.clone())
    };
    // One request per distinct flavor the list did not show, in parallel: this runs inside
    // every create and PATCH.
    let specs = futures::future::join_all(ids.iter().map(|id| async move {
        match listed(id) {
            Some(specs) => Ok(specs),
            None => lookups::flavor_extra_specs(s, id).await,
        }
    }));
    ids.iter()
        .zip(specs.await)
        .filter_map(|(id, specs)| match specs {
            Ok(specs) => crate::domain::resources::flavor_has_gpu(
                specs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .then(|| (*id).clone()),
            Err(e) => {
                tracing::debug!(flavor = %id, error = %e, "flavor extra specs not read");
                None
            }
        })
        .collect()
}

/// `boot_volume_size` from the labels, else the configured default (Magnum's
/// `[cinder] default_boot_volume_size`).
pub fn boot_volume_size(labels: &Labels, default: i64) -> Result<i64> {
    match labels.get("boot_volume_size") {
        None => Ok(default),
        Some(v) => v.trim().parse::<i64>().map_err(|_| {
            DomainError::invalid_field("boot_volume_size", v, "boot_volume_size must be an integer")
                .into()
        }),
    }
}

/// The caller's Nova keypair (404 when missing, as Magnum).
pub async fn keypair(s: &UserSession, name: &str) -> Result<()> {
    match lookups::keypair_exists(s, name).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(DomainError::NotFound(format!("Unable to find keypair {name}.")).into()),
        Err(e) => Err(or_else(e, DomainError::not_authorized)),
    }
}

/// One match or Magnum's errors for none (400: "Unable to find <kind> X.") and several (409).
fn unique<T>(found: Vec<T>, kind: &str, plural: &str, ident: &str) -> Result<T> {
    match <[_; 1]>::try_from(found) {
        Ok([one]) => Ok(one),
        Err(v) if v.is_empty() => {
            Err(DomainError::BadRequest(format!("Unable to find {kind} {ident}.")).into())
        }
        Err(_) => Err(DomainError::Conflict(format!(
            "Multiple {plural} exist with same name '{ident}'. Please use the {} ID instead.",
            kind.trim_start_matches("fixed ")
        ))
        .into()),
    }
}

/// A `router:external` Neutron network by name or id.
pub async fn external_network(s: &UserSession, ident: &str) -> Result<String> {
    let found = lookups::networks(s, ident, true)
        .await
        .map_err(|e| or_else(e, DomainError::not_authorized))?;
    Ok(unique(found, "external network", "external networks", ident)?.id)
}

/// Any Neutron network by name or id.
pub async fn fixed_network(s: &UserSession, ident: &str) -> Result<String> {
    let found = lookups::networks(s, ident, false)
        .await
        .map_err(|e| or_else(e, DomainError::not_authorized))?;
    Ok(unique(found, "fixed network", "networks", ident)?.id)
}

/// A Neutron subnet by name or id.
pub async fn fixed_subnet(s: &UserSession, ident: &str) -> Result<String> {
    let found = lookups::subnets(s, ident)
        .await
        .map_err(|e| or_else(e, DomainError::not_authorized))?;
    Ok(unique(found, "fixed subnet", "subnets", ident)?.id)
}

/// What a template or cluster names in OpenStack, after inheritance.
#[derive(Debug, Default)]
pub struct Wanted<'a> {
    pub image: Option<&'a str>,
    pub flavor: Option<&'a str>,
    pub master_flavor: Option<&'a str>,
    pub external_network: Option<&'a str>,
    pub fixed_network: Option<&'a str>,
    pub fixed_subnet: Option<&'a str>,
    /// Checked for clusters only (templates' keypairs are not validated by Magnum).
    pub keypair: Option<&'a str>,
    pub boot_volume_size: i64,
}

impl<'a> Wanted<'a> {
    /// A template's references (also what a cluster inherits).
    pub fn template(t: &'a TemplateRow, boot_volume_size: i64) -> Self {
        Wanted {
            image: t.image_id.as_deref(),
            flavor: t.flavor_id.as_deref(),
            master_flavor: t.master_flavor_id.as_deref(),
            external_network: t.external_network_id.as_deref(),
            fixed_network: t.fixed_network.as_deref(),
            fixed_subnet: t.fixed_subnet.as_deref(),
            keypair: None,
            boot_volume_size,
        }
    }
}

/// Validates everything `w` names and returns the resolved ids. The look-ups go out together
/// (a create waits for the slowest, not for their sum); their errors are reported in Magnum's
/// order (image, flavors, external network, fixed network, fixed subnet, then the keypair).
pub async fn validate(s: &UserSession, w: &Wanted<'_>) -> Result<Resolved> {
    async fn opt<T, F: std::future::Future<Output = Result<T>>>(f: Option<F>) -> Result<Option<T>> {
        match f {
            Some(f) => f.await.map(Some),
            None => Ok(None),
        }
    }
    let flavors = async {
        if w.flavor.is_none() && w.master_flavor.is_none() {
            return Ok::<_, Error>(None);
        }
        let flavors = Flavors::fetch(s).await?;
        let flavor_id = w
            .flavor
            .map(|f| flavors.check(f, w.boot_volume_size))
            .transpose()?;
        let master_flavor_id = w
            .master_flavor
            .map(|f| flavors.check(f, w.boot_volume_size))
            .transpose()?;
        let sizes = [&flavor_id, &master_flavor_id]
            .into_iter()
            .flatten()
            .filter_map(|id| Some((id.clone(), flavors.size(id)?)))
            .collect();
        let gpus = gpu_flavors(s, &flavors, [&flavor_id, &master_flavor_id]).await;
        Ok::<_, Error>(Some((flavor_id, master_flavor_id, gpus, sizes)))
    };
    let (image, flavors, external, fixed, subnet, keypair_ok) = tokio::join!(
        opt(w.image.map(|i| image(s, i))),
        flavors,
        opt(w.external_network.map(|n| external_network(s, n))),
        opt(w.fixed_network.map(|n| fixed_network(s, n))),
        opt(w.fixed_subnet.map(|n| fixed_subnet(s, n))),
        opt(w.keypair.map(|k| keypair(s, k))),
    );
    let mut r = Resolved::default();
    if let Some(img) = image? {
        r.image_id = Some(img.id);
        r.os_distro = img.os_distro;
        r.kube_version = img.kube_version;
    }
    if let Some((flavor_id, master_flavor_id, gpus, sizes)) = flavors? {
        r.flavor_id = flavor_id;
        r.master_flavor_id = master_flavor_id;
        r.gpu_flavor_ids = gpus;
        r.flavor_sizes = sizes;
    }
    r.external_network_id = external?;
    r.fixed_network_id = fixed?;
    r.fixed_subnet_id = subnet?;
    keypair_ok?;
    Ok(r)
}
