-- OpenStack ids a template / cluster resolved to when validated against Glance, Nova and
-- Neutron (image, flavors, networks, subnet), kept for the driver.
ALTER TABLE cluster_template ADD COLUMN resolved JSONB NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE cluster ADD COLUMN resolved JSONB NOT NULL DEFAULT '{}'::jsonb;
