DROP TABLE pending_hooks;
