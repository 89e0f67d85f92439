"""Security at the connection: TLS contexts per listener, the SASL exchange of a connection, the durable user
and ACL stores, and the authorization checks the services call. The decisions themselves are sans-IO, in
``coordinator.core.security``."""
