package gormstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm/logger"
)

// slowStatement is how long a statement may take before it is worth a
// warning.
const slowStatement = time.Second

// gormLogger bridges gorm's logger to slog at warn level. It logs no errors
// of statements (the Store returns them; its caller logs them once) and no
// statement arguments (they hold payloads), and never sees the DSN.
type gormLogger struct{ log *slog.Logger }

var (
	_ logger.Interface = gormLogger{}
	_ interface {
		ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any)
	} = gormLogger{}
)

func newGormLogger(l *slog.Logger) gormLogger { return gormLogger{log: l} }

// LogMode is a no-op: the level is fixed at warn.
func (g gormLogger) LogMode(logger.LogLevel) logger.Interface { return g }

// Info drops gorm's chatter.
func (g gormLogger) Info(context.Context, string, ...any) {}

// Warn logs gorm's own warnings.
func (g gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	g.log.WarnContext(ctx, "gorm: "+fmt.Sprintf(msg, args...))
}

// Error logs gorm's own errors, at warn level like the rest.
func (g gormLogger) Error(ctx context.Context, msg string, args ...any) {
	g.log.WarnContext(ctx, "gorm: "+fmt.Sprintf(msg, args...))
}

// Trace warns about slow statements, with the statement's text clipped and
// without its arguments.
func (g gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), _ error) {
	elapsed := time.Since(begin)
	if elapsed < slowStatement || !g.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	sql, rows := fc()
	if len(sql) > 200 {
		sql = sql[:200] + "…"
	}
	g.log.WarnContext(ctx, "audit store: slow statement", "elapsed", elapsed, "rows", rows, "sql", sql)
}

// ParamsFilter drops the arguments from the statement text gorm builds for
// Trace.
func (g gormLogger) ParamsFilter(_ context.Context, sql string, _ ...any) (string, []any) {
	return sql, nil
}
