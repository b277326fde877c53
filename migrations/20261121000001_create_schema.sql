-- The Magnum data model (contract §9) plus the durable operation queue.
-- JSON columns hold `{}` / `[]` rather than NULL where Magnum does the same.

CREATE TABLE cluster_template (
    id                    BIGSERIAL PRIMARY KEY,
    uuid                  UUID NOT NULL UNIQUE,
    project_id            TEXT NOT NULL,
    user_id               TEXT NOT NULL,
    name                  TEXT,
    image_id              TEXT,
    flavor_id             TEXT,
    master_flavor_id      TEXT,
    keypair_id            TEXT,
    external_network_id   TEXT,
    fixed_network         TEXT,
    fixed_subnet          TEXT,
    network_driver        TEXT,
    volume_driver         TEXT,
    dns_nameserver        TEXT,
    apiserver_port        INTEGER,
    docker_volume_size    INTEGER,
    docker_storage_driver TEXT,
    cluster_distro        TEXT,
    coe                   TEXT,
    http_proxy            TEXT,
    https_proxy           TEXT,
    no_proxy              TEXT,
    registry_enabled      BOOLEAN NOT NULL DEFAULT FALSE,
    labels                JSONB NOT NULL DEFAULT '{}',
    tls_disabled          BOOLEAN NOT NULL DEFAULT FALSE,
    public                BOOLEAN NOT NULL DEFAULT FALSE,
    server_type           TEXT,
    insecure_registry     TEXT,
    master_lb_enabled     BOOLEAN NOT NULL DEFAULT FALSE,
    floating_ip_enabled   BOOLEAN NOT NULL DEFAULT TRUE,
    hidden                BOOLEAN NOT NULL DEFAULT FALSE,
    tags                  TEXT,
    driver                TEXT,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ
);
CREATE INDEX cluster_template_project_idx ON cluster_template (project_id);
CREATE INDEX cluster_template_name_idx ON cluster_template (name);

CREATE TABLE cluster (
    id                      BIGSERIAL PRIMARY KEY,
    uuid                    UUID NOT NULL UNIQUE,
    project_id              TEXT NOT NULL,
    user_id                 TEXT NOT NULL,
    name                    TEXT,
    cluster_template_id     UUID NOT NULL REFERENCES cluster_template (uuid),
    keypair                 TEXT,
    docker_volume_size      INTEGER,
    labels                  JSONB NOT NULL DEFAULT '{}',
    master_flavor_id        TEXT,
    flavor_id               TEXT,
    stack_id                TEXT,
    api_address             TEXT,
    status                  TEXT NOT NULL,
    status_reason           TEXT,
    health_status           TEXT,
    health_status_reason    JSONB NOT NULL DEFAULT '{}',
    create_timeout          INTEGER,
    discovery_url           TEXT,
    coe_version             TEXT,
    container_version       TEXT,
    ca_cert_ref             TEXT,
    magnum_cert_ref         TEXT,
    etcd_ca_cert_ref        TEXT,
    front_proxy_ca_cert_ref TEXT,
    fixed_network           TEXT,
    fixed_subnet            TEXT,
    floating_ip_enabled     BOOLEAN DEFAULT TRUE,
    master_lb_enabled       BOOLEAN DEFAULT FALSE,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at              TIMESTAMPTZ
);
CREATE INDEX cluster_project_idx ON cluster (project_id);
CREATE INDEX cluster_name_idx ON cluster (name);
CREATE INDEX cluster_template_ref_idx ON cluster (cluster_template_id);

CREATE TABLE nodegroup (
    id                 BIGSERIAL PRIMARY KEY,
    uuid               UUID NOT NULL UNIQUE,
    name               TEXT NOT NULL,
    cluster_id         UUID NOT NULL REFERENCES cluster (uuid) ON DELETE CASCADE,
    project_id         TEXT NOT NULL,
    docker_volume_size INTEGER,
    labels             JSONB NOT NULL DEFAULT '{}',
    flavor_id          TEXT,
    image_id           TEXT,
    node_addresses     JSONB NOT NULL DEFAULT '[]',
    node_count         INTEGER NOT NULL,
    role               TEXT NOT NULL,
    max_node_count     INTEGER,
    min_node_count     INTEGER NOT NULL DEFAULT 0,
    is_default         BOOLEAN NOT NULL DEFAULT FALSE,
    stack_id           TEXT,
    status             TEXT,
    status_reason      TEXT,
    version            TEXT,
    node_labels        JSONB,
    node_taints        JSONB,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ,
    CONSTRAINT uniq_nodegroup0cluster_id0name UNIQUE (cluster_id, name)
);

CREATE TABLE quotas (
    id         BIGSERIAL PRIMARY KEY,
    project_id TEXT NOT NULL,
    resource   TEXT NOT NULL,
    hard_limit INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ,
    CONSTRAINT uniq_quotas0project_id0resource UNIQUE (project_id, resource)
);

CREATE TABLE magnum_service (
    id              BIGSERIAL PRIMARY KEY,
    host            TEXT NOT NULL,
    "binary"        TEXT NOT NULL,
    disabled        BOOLEAN NOT NULL DEFAULT FALSE,
    disabled_reason TEXT,
    last_seen_up    TIMESTAMPTZ,
    forced_down     BOOLEAN NOT NULL DEFAULT FALSE,
    report_count    INTEGER NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ,
    CONSTRAINT uniq_magnum_service0host0binary UNIQUE (host, "binary")
);

-- Durable cluster operations: written in the same transaction as the state change that the
-- API acknowledges, claimed by workers with FOR UPDATE SKIP LOCKED under a lease.
CREATE TABLE operation (
    id             BIGSERIAL PRIMARY KEY,
    cluster_uuid   UUID NOT NULL,
    nodegroup_uuid UUID,
    kind           TEXT NOT NULL,
    payload        JSONB NOT NULL DEFAULT '{}',
    state          TEXT NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'running', 'done', 'failed')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    not_before     TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by      TEXT,
    locked_until   TIMESTAMPTZ,
    last_error     TEXT,
    request_id     TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ,
    finished_at    TIMESTAMPTZ
);
CREATE INDEX operation_open_idx ON operation (id) WHERE state IN ('pending', 'running');
CREATE INDEX operation_cluster_idx ON operation (cluster_uuid, id);
