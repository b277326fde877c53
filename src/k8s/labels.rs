//! Labels the Cluster API projects define and set on their objects: the vocabulary the driver
//! selects by and the (simulated) controllers write.

/// CAPI's own label naming the cluster an object belongs to.
pub const LABEL_CAPI_CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// CAAPH's label on a HelmReleaseProxy naming its HelmChartProxy (add-on health).
pub const LABEL_HELM_CHART_PROXY: &str =
    "helmreleaseproxy.addons.cluster.x-k8s.io/helmchartproxy-name";
