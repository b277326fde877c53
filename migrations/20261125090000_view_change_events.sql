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

-- The template pages' counter (20261124170000) is replaced by the notifications above: reading
-- it cost a round trip per request, and every template change wrote one hot row.
DROP TRIGGER templates_changed ON cluster_template;
DROP FUNCTION magnum_capi_templates_changed();
DROP TABLE template_generation;
