package pgschema

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// Create creates schema name (a plain identifier) in the database at
// baseURL. It returns a URL whose search_path points at the schema, and a
// function that drops the schema with everything in it. Errors never repeat
// the URL: it may hold a password.
func Create(ctx context.Context, baseURL, name string) (schemaURL string, drop func(context.Context) error, err error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return "", nil, fmt.Errorf("postgres url: %w", err)
	}
	if err := exec(ctx, baseURL, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("postgres: create schema %s: %w", name, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	drop = func(ctx context.Context) error {
		if err := exec(ctx, baseURL, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			return fmt.Errorf("postgres: drop schema %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

// exec runs one statement on a connection of its own.
func exec(ctx context.Context, baseURL, sql string) error {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
