-- Each template's serialised view kept beside it (src/service/stored_views.rs), as
-- cluster_view keeps each cluster's (20261127100000_stored_cluster_views.sql): a templates page
-- built from PostgreSQL is one statement and a concatenation of stored bytes instead of 36
-- columns, two jsonb documents parsed and a view serialised per template. `body` NULL: not built
-- yet, or retired. Every change of a template retires its view in the writing transaction (these
-- triggers: any writer, hand-made SQL included) and moves `version`; a read stores the view it
-- built only if `version` has not moved since the row was read. A template's view depends on its
-- row only. Versions come from a sequence, not a count per row: a template deleted and made again
-- with the same uuid (clients may choose it) never has a version its old row had.
CREATE SEQUENCE template_view_version;

CREATE TABLE template_view (
    template_uuid uuid PRIMARY KEY,
    version       bigint NOT NULL DEFAULT nextval('template_view_version'),
    body          bytea
);

INSERT INTO template_view (template_uuid) SELECT uuid FROM cluster_template;

CREATE FUNCTION magnum_capi_stored_template_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM template_view WHERE template_uuid = OLD.uuid;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.uuid IS DISTINCT FROM NEW.uuid THEN
        DELETE FROM template_view WHERE template_uuid = OLD.uuid;
    END IF;
    INSERT INTO template_view AS v (template_uuid) VALUES (NEW.uuid)
    ON CONFLICT (template_uuid) DO UPDATE SET version = nextval('template_view_version'), body = NULL;
    RETURN NULL;
END $$;

CREATE FUNCTION magnum_capi_all_template_views_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM template_view;
    RETURN NULL;
END $$;

CREATE TRIGGER stored_template_view_changed AFTER INSERT OR UPDATE OR DELETE ON cluster_template
    FOR EACH ROW EXECUTE FUNCTION magnum_capi_stored_template_view_changed();
CREATE TRIGGER stored_template_view_truncated AFTER TRUNCATE ON cluster_template
    FOR EACH STATEMENT EXECUTE FUNCTION magnum_capi_all_template_views_changed();

-- Fired whatever `session_replication_role` says (a logical replication subscriber, a bulk
-- load with triggers off): a stored view must never outlive a change of its row.
ALTER TABLE cluster_template ENABLE ALWAYS TRIGGER stored_template_view_changed;
ALTER TABLE cluster_template ENABLE ALWAYS TRIGGER stored_template_view_truncated;
