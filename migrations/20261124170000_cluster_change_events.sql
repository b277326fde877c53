-- Wakes the status writer of every replica (LISTEN magnum_capi_clusters, payload: the cluster's
-- uuid) when a cluster row changes or one of its operations is recorded or changes state, so
-- it does not have to poll (src/capi/watch.rs). Notifications go out when the transaction
-- commits; identical ones of one transaction are sent once.
CREATE FUNCTION magnum_capi_cluster_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('magnum_capi_clusters', NEW.uuid::text);
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_operation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('magnum_capi_clusters', NEW.cluster_uuid::text);
    RETURN NULL;
END $$;

CREATE TRIGGER cluster_changed AFTER INSERT OR UPDATE ON cluster
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_cluster_changed();

CREATE TRIGGER operation_changed AFTER INSERT OR UPDATE OF state ON operation
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_operation_changed();

-- A counter every change to the templates moves (any replica, any statement): serialised
-- template pages are reused while it stands still (src/service/templates.rs).
CREATE TABLE template_generation (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    n  bigint  NOT NULL
);
INSERT INTO template_generation (id, n) VALUES (true, 0);

CREATE FUNCTION magnum_capi_templates_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE template_generation SET n = n + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER templates_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON cluster_template
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_templates_changed();
