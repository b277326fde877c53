-- Serialised cluster and template views are reused by every replica until the data under them
-- changes (src/view_cache.rs): any change to a cluster, nodegroup or template notifies
-- `magnum_capi_views` when its transaction commits. The payload names the table; PostgreSQL
-- sends identical notifications of one transaction once.
CREATE FUNCTION magnum_capi_views_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('magnum_capi_views', TG_TABLE_NAME);
    RETURN NULL;
END $$;

-- Row triggers: a statement that changes nothing (a conditional UPDATE matching no row) stays
-- silent.
CREATE TRIGGER cluster_views_changed AFTER INSERT OR UPDATE OR DELETE ON cluster
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_views_changed();
CREATE TRIGGER nodegroup_views_changed AFTER INSERT OR UPDATE OR DELETE ON nodegroup
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_views_changed();
CREATE TRIGGER template_views_changed AFTER INSERT OR UPDATE OR DELETE ON cluster_template
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_views_changed();
CREATE TRIGGER cluster_views_truncated AFTER TRUNCATE ON cluster
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_views_changed();
CREATE TRIGGER nodegroup_views_truncated AFTER TRUNCATE ON nodegroup
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_views_changed();
CREATE TRIGGER template_views_truncated AFTER TRUNCATE ON cluster_template
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_views_changed();

-- The template pages' counter of 20261124170000 (template_generation and its trigger) is no
-- longer read by this version, but replicas of the previous version read it on every template
-- list while a rolling upgrade runs (migrations go first), so it stays until a later release.
