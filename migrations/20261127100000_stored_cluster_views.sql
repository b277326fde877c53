-- Each cluster's serialised view kept beside it (src/service/stored_views.rs), so a page built
-- from PostgreSQL is a concatenation of stored bytes instead of a labels-to-text, parse and
-- re-serialise of every row. `body` NULL: not built yet, or retired. Every change under a view
-- retires it in the writing transaction (these triggers: any writer, hand-made SQL included) and
-- moves `version`; the next read builds it and stores it only if `version` has not moved since
-- its rows were read (a change committed meanwhile is never hidden under an older body). A
-- cluster's row here is made with the cluster and removed with it.
-- A table of its own: storing a body changes no cluster row (no change notification, no status
-- writer wake-up, no bloat of the rows the writers lock).
CREATE TABLE cluster_view (
    cluster_uuid uuid PRIMARY KEY,
    version      bigint NOT NULL DEFAULT 0,
    body         bytea
);

INSERT INTO cluster_view (cluster_uuid) SELECT uuid FROM cluster;

CREATE FUNCTION magnum_capi_retire_cluster_view(u uuid) RETURNS void LANGUAGE sql AS $$
    UPDATE cluster_view SET version = version + 1, body = NULL WHERE cluster_uuid = u;
$$;

CREATE FUNCTION magnum_capi_cluster_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM cluster_view WHERE cluster_uuid = OLD.uuid;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.uuid IS DISTINCT FROM NEW.uuid THEN
        DELETE FROM cluster_view WHERE cluster_uuid = OLD.uuid;
    END IF;
    INSERT INTO cluster_view AS v (cluster_uuid) VALUES (NEW.uuid)
    ON CONFLICT (cluster_uuid) DO UPDATE SET version = v.version + 1, body = NULL;
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_nodegroup_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM magnum_capi_retire_cluster_view(OLD.cluster_id);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND (TG_OP = 'INSERT' OR NEW.cluster_id <> OLD.cluster_id) THEN
        PERFORM magnum_capi_retire_cluster_view(NEW.cluster_id);
    END IF;
    RETURN NULL;
END $$;

-- A template's labels are the parent of its clusters' label diffs (the detail views).
CREATE FUNCTION magnum_capi_template_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_view SET version = version + 1, body = NULL
     WHERE cluster_uuid IN (SELECT uuid FROM cluster
                             WHERE cluster_template_id IN (OLD.uuid, NEW.uuid));
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_all_cluster_views_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'cluster' THEN
        DELETE FROM cluster_view;
    ELSE
        UPDATE cluster_view SET version = version + 1, body = NULL;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER cluster_view_changed AFTER INSERT OR UPDATE OR DELETE ON cluster
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_cluster_view_changed();
CREATE TRIGGER nodegroup_view_changed AFTER INSERT OR UPDATE OR DELETE ON nodegroup
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_nodegroup_view_changed();
CREATE TRIGGER template_view_changed AFTER UPDATE OF labels, uuid ON cluster_template
    FOR EACH ROW WHEN (OLD.labels IS DISTINCT FROM NEW.labels OR OLD.uuid IS DISTINCT FROM NEW.uuid)
    EXECUTE FUNCTION magnum_capi_template_view_changed();
CREATE TRIGGER cluster_view_truncated AFTER TRUNCATE ON cluster
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_all_cluster_views_changed();
CREATE TRIGGER nodegroup_view_truncated AFTER TRUNCATE ON nodegroup
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_all_cluster_views_changed();
CREATE TRIGGER template_view_truncated AFTER TRUNCATE ON cluster_template
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_all_cluster_views_changed();

-- Fired whatever `session_replication_role` says (a logical replication subscriber, a bulk
-- load with triggers off): a stored view must never outlive a change of its rows.
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_view_changed;
ALTER TABLE cluster ENABLE ALWAYS TRIGGER cluster_view_truncated;
ALTER TABLE nodegroup ENABLE ALWAYS TRIGGER nodegroup_view_changed;
ALTER TABLE nodegroup ENABLE ALWAYS TRIGGER nodegroup_view_truncated;
ALTER TABLE cluster_template ENABLE ALWAYS TRIGGER template_view_changed;
ALTER TABLE cluster_template ENABLE ALWAYS TRIGGER template_view_truncated;
