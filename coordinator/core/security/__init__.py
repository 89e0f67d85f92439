"""Security, sans-IO: SASL mechanisms (PLAIN, SCRAM) and their credentials, SSL principal mapping, and the
ACL authorizer's decisions. No sockets, no TLS, no files, no clock here: callers pass bytes, credentials
and ``now_ms``; the runtime (``coordinator/runtime/security``) owns connections and storage."""
