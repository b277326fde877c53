//! Talking to the management cluster: server-side apply of rendered objects in order (keeping
//! the OpenStackCluster fields CAPO's webhook makes immutable), reads, label-selected lists and
//! deletes, all through `kube` with `DynamicObject` (no crate ships CAPO types).

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PropagationPolicy,
};
use serde_json::{Map, Value};

/// How a management-cluster call failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// Unreachable, timed out, throttled or conflicting: retrying can help.
    #[error("management cluster unavailable: {0}")]
    Unavailable(String),
    /// The API refused the object (schema, webhook, forbidden): retrying the same object cannot.
    #[error("management cluster refused {what}: {message}")]
    Refused { what: String, message: String },
    /// A rendered object lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("rendered object is incomplete: {0}")]
    Malformed(String),
}

impl KubeError {
    fn from_kube(what: &str, e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 405 | 415 | 422) => {
                KubeError::Refused {
                    what: what.to_string(),
                    message: s.message.clone(),
                }
            }
            other => KubeError::Unavailable(format!("{what}: {other}")),
        }
    }

    /// Whether retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, KubeError::Unavailable(_))
    }
}

/// The `ApiResource` of an `apiVersion` + `kind` (plural guessed by kube: right for every kind
/// we render, e.g. `openstackmachinetemplates`, `helmchartproxies`).
pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Identity of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    /// A namespaced object of kind `gvk`.
    pub fn new(gvk: super::kinds::Gvk, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: gvk.0.into(),
            kind: gvk.1.into(),
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    pub fn of(obj: &Value) -> Result<Self, KubeError> {
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_string);
        let api_version =
            s("/apiVersion").ok_or_else(|| KubeError::Malformed("apiVersion".into()))?;
        let kind = s("/kind").ok_or_else(|| KubeError::Malformed("kind".into()))?;
        let name = s("/metadata/name")
            .ok_or_else(|| KubeError::Malformed(format!("{kind} without metadata.name")))?;
        Ok(ObjectRef {
            api_version,
            kind,
            namespace: s("/metadata/namespace"),
            name,
        })
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Fields of an OpenStackCluster spec CAPO's validating webhook lets change after create
/// (everything else is immutable, and a changed value would make the whole apply fail).
const OSC_MUTABLE: &[&str] = &["identityRef", "bastion", "managedSecurityGroups", "tags"];

/// The OpenStackCluster spec to apply over a live one: the live spec (minus what CAPO itself
/// writes), with only the mutable fields and the LB's `allowedCIDRs` taken from the rendering.
pub fn preserve_immutable(rendered: &Value, live: &Value) -> Value {
    let Some(live_spec) = live.get("spec").and_then(Value::as_object) else {
        return rendered.clone();
    };
    let rendered_spec = rendered.get("spec").and_then(Value::as_object);
    let mut spec: Map<String, Value> = live_spec.clone();
    // Written by CAPO (or CAPI) after create: not ours to own.
    spec.remove("controlPlaneEndpoint");
    for key in OSC_MUTABLE {
        match rendered_spec.and_then(|s| s.get(*key)) {
            Some(v) => {
                spec.insert((*key).to_string(), v.clone());
            }
            None => {
                spec.remove(*key);
            }
        }
    }
    let cidrs = rendered_spec
        .and_then(|s| s.get("apiServerLoadBalancer"))
        .and_then(|lb| lb.get("allowedCIDRs"))
        .cloned();
    if let Some(Value::Object(lb)) = spec.get_mut("apiServerLoadBalancer") {
        match cidrs {
            Some(c) => {
                lb.insert("allowedCIDRs".into(), c);
            }
            None => {
                lb.remove("allowedCIDRs");
            }
        }
    }
    let mut out = rendered.clone();
    if let Some(o) = out.as_object_mut() {
        o.insert("spec".into(), Value::Object(spec));
    }
    out
}

/// A management cluster, as one field manager.
#[derive(Clone)]
pub struct Mgmt {
    client: kube::Client,
    field_manager: String,
}

impl std::fmt::Debug for Mgmt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mgmt")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl Mgmt {
    pub fn new(client: kube::Client, field_manager: &str) -> Self {
        Mgmt {
            client,
            field_manager: field_manager.to_string(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn api(&self, api_version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = resource(api_version, kind);
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Reads one object; `None` when it does not exist.
    pub async fn get(&self, r: &ObjectRef) -> Result<Option<DynamicObject>, KubeError> {
        self.api(&r.api_version, &r.kind, r.namespace.as_deref())
            .get_opt(&r.name)
            .await
            .map_err(|e| KubeError::from_kube(&r.to_string(), e))
    }

    /// Reads one object as JSON; `None` when it does not exist.
    pub async fn get_value(&self, r: &ObjectRef) -> Result<Option<Value>, KubeError> {
        self.get(r)
            .await?
            .map(|o| serde_json::to_value(&o).map_err(|e| KubeError::Malformed(e.to_string())))
            .transpose()
    }

    /// Server-side apply (`force`, our field manager) of one object.
    pub async fn apply(&self, obj: &Value) -> Result<(), KubeError> {
        let r = ObjectRef::of(obj)?;
        let mut obj = obj.clone();
        if r.kind == "OpenStackCluster"
            && let Some(live) = self.get_value(&r).await?
        {
            obj = preserve_immutable(&obj, &live);
        }
        let params = PatchParams::apply(&self.field_manager).force();
        self.api(&r.api_version, &r.kind, r.namespace.as_deref())
            .patch(&r.name, &params, &Patch::Apply(&obj))
            .await
            .map_err(|e| KubeError::from_kube(&r.to_string(), e))?;
        Ok(())
    }

    /// Applies `objects` one after the other, in the order given (the renderer's dependency
    /// order); stops at the first failure. Replaying the same set is a no-op.
    pub async fn apply_all(&self, objects: &[Value]) -> Result<(), KubeError> {
        for obj in objects {
            self.apply(obj).await?;
        }
        Ok(())
    }

    /// Deletes one object; gone already is fine. Cluster API's kinds are deleted in the
    /// foreground, so the object stays (deleting) until what it owns is gone and its watchers
    /// see the cascade. The core kinds (Secrets, ConfigMaps) own nothing and go at once: in the
    /// foreground the apiserver would keep each until the garbage collector took its
    /// `foregroundDeletion` finalizer off, seconds on a busy management cluster, with the
    /// credential still in it and its name not free for the next apply.
    pub async fn delete(&self, r: &ObjectRef) -> Result<(), KubeError> {
        let dp = DeleteParams {
            propagation_policy: Some(if r.api_version == "v1" {
                PropagationPolicy::Background
            } else {
                PropagationPolicy::Foreground
            }),
            ..DeleteParams::default()
        };
        match self
            .api(&r.api_version, &r.kind, r.namespace.as_deref())
            .delete(&r.name, &dp)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(KubeError::from_kube(&r.to_string(), e)),
        }
    }

    /// Deletes one object and drops its finalizers, so it goes whatever its controller would
    /// have done first (an administrator forgetting a cluster); gone already is fine.
    pub async fn remove(&self, r: &ObjectRef) -> Result<(), KubeError> {
        let api = self.api(&r.api_version, &r.kind, r.namespace.as_deref());
        let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
        match api.delete(&r.name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(KubeError::from_kube(&r.to_string(), e)),
        }
        let strip = serde_json::json!({"metadata": {"finalizers": null}});
        match api
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&strip))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if gone(&e) => Ok(()),
            Err(e) => Err(KubeError::from_kube(&r.to_string(), e)),
        }
    }

    /// Objects of one kind in `ns` carrying `selector`.
    pub async fn list(
        &self,
        gvk: super::kinds::Gvk,
        ns: &str,
        selector: &str,
    ) -> Result<Vec<DynamicObject>, KubeError> {
        match self
            .api(gvk.0, gvk.1, Some(ns))
            .list(&ListParams::default().labels(selector))
            .await
        {
            Ok(l) => Ok(l.items),
            // A kind whose CRD is not installed has no objects.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
            Err(e) => Err(KubeError::from_kube(gvk.1, e)),
        }
    }

    /// Deletes every object of one kind in `ns` carrying `selector`.
    pub async fn delete_labelled(
        &self,
        gvk: super::kinds::Gvk,
        ns: &str,
        selector: &str,
    ) -> Result<(), KubeError> {
        for o in self.list(gvk, ns, selector).await? {
            let name = o.metadata.name.unwrap_or_default();
            self.delete(&ObjectRef::new(gvk, ns, &name)).await?;
        }
        Ok(())
    }

    /// Merge-patches the annotations of one object.
    pub async fn annotate(
        &self,
        r: &ObjectRef,
        annotations: &Map<String, Value>,
    ) -> Result<(), KubeError> {
        self.merge_patch(
            r,
            &serde_json::json!({"metadata": {"annotations": annotations}}),
        )
        .await
    }

    /// Merge-patches the labels of one object.
    pub async fn label(&self, r: &ObjectRef, labels: &Map<String, Value>) -> Result<(), KubeError> {
        self.merge_patch(r, &serde_json::json!({"metadata": {"labels": labels}}))
            .await
    }

    /// JSON-patches one object (`ops`: RFC 6902 operations): changes exactly the paths named,
    /// as an `Update` of the paths it touches, nothing else of the object.
    pub async fn json_patch(&self, r: &ObjectRef, ops: &Value) -> Result<(), KubeError> {
        let patch: json_patch::Patch =
            serde_json::from_value(ops.clone()).map_err(|e| KubeError::Malformed(e.to_string()))?;
        self.api(&r.api_version, &r.kind, r.namespace.as_deref())
            .patch(&r.name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(|e| KubeError::from_kube(&r.to_string(), e))?;
        Ok(())
    }

    /// Merge-patches one object (a `metadata.resourceVersion` in `patch` makes it conditional).
    pub async fn merge_patch(&self, r: &ObjectRef, patch: &Value) -> Result<(), KubeError> {
        self.api(&r.api_version, &r.kind, r.namespace.as_deref())
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| KubeError::from_kube(&r.to_string(), e))?;
        Ok(())
    }

    /// Objects of one kind in every namespace carrying `selector`.
    pub async fn list_all(
        &self,
        gvk: super::kinds::Gvk,
        selector: &str,
    ) -> Result<Vec<DynamicObject>, KubeError> {
        self.api(gvk.0, gvk.1, None)
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .map_err(|e| KubeError::from_kube(gvk.1, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    #[test]
    fn immutable_openstackcluster_fields_come_from_the_live_object() {
        let rendered = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": "k1", "namespace": "magnum-p"},
            "spec": {"apiServerLoadBalancer": {"enabled": true, "provider": "ovn", "allowedCIDRs": ["10.0.0.0/8"]},
                     "disableAPIServerFloatingIP": true,
                     "identityRef": {"cloudName": "openstack", "name": "k1-cloud-credentials"},
                     "managedSecurityGroups": {"allowAllInClusterTraffic": true}}});
        let live = json!({"spec": {"apiServerLoadBalancer": {"enabled": true, "provider": "amphora"},
                     "disableAPIServerFloatingIP": false,
                     "controlPlaneEndpoint": {"host": "203.0.113.5", "port": 6443},
                     "identityRef": {"cloudName": "openstack", "name": "old"},
                     "bastion": {"enabled": false}}});
        let out = preserve_immutable(&rendered, &live);
        let spec = &out["spec"];
        assert_eq!(spec["apiServerLoadBalancer"]["provider"], "amphora");
        assert_eq!(
            spec["apiServerLoadBalancer"]["allowedCIDRs"],
            json!(["10.0.0.0/8"])
        );
        assert_eq!(spec["disableAPIServerFloatingIP"], false);
        assert_eq!(spec["identityRef"]["name"], "k1-cloud-credentials");
        assert_eq!(
            spec["managedSecurityGroups"]["allowAllInClusterTraffic"],
            true
        );
        assert!(spec.get("controlPlaneEndpoint").is_none());
        assert!(spec.get("bastion").is_none());
        assert_eq!(out["metadata"]["name"], "k1");
        // No live object: the rendering as is.
        assert_eq!(preserve_immutable(&rendered, &json!({})), rendered);
    }

    #[test]
    fn resources_name_the_right_paths() {
        let r = resource(
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "OpenStackMachineTemplate",
        );
        assert_eq!(r.plural, "openstackmachinetemplates");
        assert_eq!(resource("v1", "Secret").group, "");
        assert_eq!(
            resource("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy").plural,
            "helmchartproxies"
        );
    }

    /// Request shapes, against kube's tower-test mock: every apply is a PATCH with the
    /// apply-patch content type, our field manager and force, in the order given.
    #[tokio::test]
    async fn apply_all_sends_server_side_apply_in_order() {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(svc, "default");
        let mgmt = Mgmt::new(client, "magnum-capi");
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "magnum-p"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k1-ca", "namespace": "magnum-p"}}),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "k1", "namespace": "magnum-p"}}),
        ];
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (req, send) = handle.next_request().await.unwrap();
                let ct = req
                    .headers()
                    .get("content-type")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                seen.push((req.method().to_string(), req.uri().to_string(), ct));
                let body = req.into_body().collect_bytes().await.unwrap();
                let v: Value = serde_json::from_slice(&body).unwrap();
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&v).unwrap()))
                        .unwrap(),
                );
            }
            seen
        });
        mgmt.apply_all(&objects).await.unwrap();
        let seen = server.await.unwrap();
        let paths: Vec<&str> = seen
            .iter()
            .map(|(_, u, _)| u.split('?').next().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/api/v1/namespaces/magnum-p",
                "/api/v1/namespaces/magnum-p/secrets/k1-ca",
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/magnum-p/clusters/k1",
            ]
        );
        for (method, uri, ct) in &seen {
            assert_eq!(method, "PATCH");
            assert_eq!(ct, "application/apply-patch+yaml");
            assert!(uri.contains("fieldManager=magnum-capi"), "{uri}");
            assert!(uri.contains("force=true"), "{uri}");
        }
    }

    /// An OpenStackCluster is read before it is applied, and what CAPO made immutable is sent
    /// as the live object has it.
    #[tokio::test]
    async fn openstackcluster_apply_keeps_the_live_immutable_fields() {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let mgmt = Mgmt::new(kube::Client::new(svc, "default"), "magnum-capi");
        let rendered = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": "k1", "namespace": "magnum-p"},
            "spec": {"apiServerLoadBalancer": {"enabled": true, "provider": "ovn"}}});
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.unwrap();
            assert_eq!(req.method(), "GET");
            let live = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
                "metadata": {"name": "k1", "namespace": "magnum-p"},
                "spec": {"apiServerLoadBalancer": {"enabled": true, "provider": "amphora"}}});
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&live).unwrap()))
                    .unwrap(),
            );
            let (req, send) = handle.next_request().await.unwrap();
            assert_eq!(req.method(), "PATCH");
            let body = req.into_body().collect_bytes().await.unwrap();
            let sent: Value = serde_json::from_slice(&body).unwrap();
            send.send_response(Response::builder().body(Body::from(body)).unwrap());
            sent
        });
        mgmt.apply(&rendered).await.unwrap();
        let sent = server.await.unwrap();
        assert_eq!(sent["spec"]["apiServerLoadBalancer"]["provider"], "amphora");
    }

    /// CAPI's kinds are deleted in the foreground (they cascade), Secrets in the background
    /// (at once), and a 404 counts as deleted.
    #[tokio::test]
    async fn deletes_cascade_for_capi_only_and_tolerate_absence() {
        for (api_version, kind, path, policy) in [
            (
                "cluster.x-k8s.io/v1beta2",
                "Cluster",
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/magnum-p/clusters/k1",
                "Foreground",
            ),
            (
                "v1",
                "Secret",
                "/api/v1/namespaces/magnum-p/secrets/k1",
                "Background",
            ),
        ] {
            let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let mgmt = Mgmt::new(kube::Client::new(svc, "default"), "magnum-capi");
            let server = tokio::spawn(async move {
                let (req, send) = handle.next_request().await.unwrap();
                assert_eq!(req.method(), "DELETE");
                assert_eq!(req.uri().path(), path);
                let body = req.into_body().collect_bytes().await.unwrap();
                let v: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v["propagationPolicy"], policy, "{kind}");
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found", "metadata": {}});
                send.send_response(
                    Response::builder()
                        .status(404)
                        .body(Body::from(serde_json::to_vec(&status).unwrap()))
                        .unwrap(),
                );
            });
            let r = ObjectRef {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: Some("magnum-p".into()),
                name: "k1".into(),
            };
            mgmt.delete(&r).await.unwrap();
            server.await.unwrap();
        }
    }
}
