-- The template an upgrade left and the one it moves to, from the moment the upgrade is applied
-- until the cluster is stable again (issue 46): a failed upgrade puts the cluster back on the
-- template it left (`cluster_template_id`), a rollback to that template is told apart from a
-- downgrade, and the template stays undeletable meanwhile. NULL: no upgrade in flight.
ALTER TABLE cluster ADD COLUMN upgrade_from JSONB;
