DROP TABLE inbox;
