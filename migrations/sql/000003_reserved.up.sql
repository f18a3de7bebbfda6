-- seqlease 3: reserved; it changes nothing.
SELECT 1;
