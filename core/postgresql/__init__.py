"""PostgreSQL backend with row-level-security scopes (``core.rls``): ``ENGINE = "core.postgresql"``."""
