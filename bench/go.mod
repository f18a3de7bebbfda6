module github.com/seqlease/seqlease/bench

go 1.26.0

require (
	cirello.io/pglock v1.16.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/seqlease/seqlease v0.0.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/lib/pq v1.10.9 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/seqlease/seqlease => ../
