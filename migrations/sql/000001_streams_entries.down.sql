DROP TABLE entries;
DROP TABLE streams;
