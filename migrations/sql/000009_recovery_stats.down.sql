DROP TABLE recovery_stats;
