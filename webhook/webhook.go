// Package webhook delivers chatd's webhook events (docs/webhooks.md): a run that
// completed, failed, was cancelled or waits for a person. The events are queued in the
// database's outbox by the statement that stores the run's change (store.EnableWebhooks);
// a Deliverer on every node claims the events that are due, POSTs each to the
// configured URL signed per the Standard Webhooks specification, and records the
// outcome: at least once, with backoff, across restarts, and one node at a time per
// event.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/service"
	"github.com/chatd/chatd/store"
)

// Defaults of Config.
const (
	DefaultPollInterval = time.Second
	DefaultTimeout      = 15 * time.Second
	DefaultBatch        = 16
)

// Backoff is the wait after each failed attempt: the event is tried len(Backoff)+1 times
// in all (about 16 hours), then given up.
var Backoff = []time.Duration{
	5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
}

// Store is what a Deliverer needs of the database. *store.Store implements it.
type Store interface {
	WebhookClaim(ctx context.Context, now, lockedUntil time.Time, limit int) ([]store.WebhookEvent, error)
	WebhookDelivered(ctx context.Context, id uuid.UUID, at time.Time) error
	WebhookRetry(ctx context.Context, id uuid.UUID, lastError string, at, next time.Time, giveUp bool) error
}

// Config configures a Deliverer.
type Config struct {
	// URL receives every event (CHATD_WEBHOOK_URL).
	URL string
	// Secret signs them: Standard Webhooks' whsec_ form (CHATD_WEBHOOK_SECRET).
	Secret string
	Store  Store
	// Client sends them; nil: one that follows no redirect.
	Client *http.Client
	Clock  clockwork.Clock
	Logger zerolog.Logger
	// Registry, when set, gets the delivery metrics.
	Registry prometheus.Registerer
	// PollInterval is how often the outbox is read for due events.
	PollInterval time.Duration
	// Timeout bounds one attempt; a node's claim on an event lasts a little longer.
	Timeout time.Duration
	// Batch is how many events one poll claims, and sends at once.
	Batch int
}

// Deliverer is the delivery service of one node.
type Deliverer struct {
	cfg      Config
	secret   []byte
	log      zerolog.Logger
	attempts *prometheus.CounterVec
	loop     service.Loop
}

// ParseSecret decodes a secret in Standard Webhooks' form: "whsec_" then base64 of 24 to
// 64 random bytes.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New(`the webhook secret must start with "whsec_" (Standard Webhooks' form: whsec_ then base64 of 24 to 64 random bytes)`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("the webhook secret after whsec_ is not base64: %w", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("the webhook secret is %d bytes; it must be 24 to 64", len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature header of a message: "v1," and the base64
// HMAC-SHA256 of "id.timestamp.body" under the secret's key.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// New returns a Deliverer for cfg; an error for a bad secret.
func New(cfg Config) (*Deliverer, error) {
	key, err := ParseSecret(cfg.Secret)
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	d := &Deliverer{cfg: cfg, secret: key, log: cfg.Logger.With().Str("component", "webhooks").Logger(),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_webhook_attempts_total",
			Help: "Webhook delivery attempts by this node, by result: delivered, retry (failed, tried again later) or failed (failed for the last time).",
		}, []string{"result"})}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(d.attempts)
	}
	return d, nil
}

// Start starts polling the outbox.
func (d *Deliverer) Start(context.Context) error { return d.loop.Start(d.run) }

// Stop stops polling; attempts under way are cut off and due again at once (for
// another node, or the next life of this one).
func (d *Deliverer) Stop(ctx context.Context) error { return d.loop.Stop(ctx) }

func (d *Deliverer) run(stop <-chan struct{}) {
	service.Every(stop, d.cfg.Clock, d.cfg.PollInterval, func(ctx context.Context) {
		for d.Poll(ctx) == d.cfg.Batch && ctx.Err() == nil {
			// A full batch: there may be more due now.
		}
	})
}

// Poll claims the events due now and sends them, at once, and returns how many it
// claimed.
func (d *Deliverer) Poll(ctx context.Context) int {
	now := d.cfg.Clock.Now()
	events, err := d.cfg.Store.WebhookClaim(ctx, now, now.Add(d.cfg.Timeout+30*time.Second), d.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn().Err(err).Msg("read the webhook outbox")
		}
		return 0
	}
	var wg sync.WaitGroup
	for _, ev := range events {
		wg.Go(func() { d.deliver(ctx, ev) })
	}
	wg.Wait()
	return len(events)
}

func (d *Deliverer) deliver(ctx context.Context, ev store.WebhookEvent) {
	err := d.send(ctx, ev)
	now := d.cfg.Clock.Now()
	// Recorded even when the node is stopping: a delivered event must not be sent again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	log := d.log.With().Str("webhook_id", ev.ID.String()).Str("type", ev.Type).Str("run_id", ev.RunID.String()).Int("attempt", ev.Attempts).Logger()
	if err == nil {
		d.attempts.WithLabelValues("delivered").Inc()
		if err := d.cfg.Store.WebhookDelivered(rctx, ev.ID, now); err != nil {
			log.Error().Err(err).Msg("record a delivered webhook (it will be sent again)")
		}
		return
	}
	if ctx.Err() != nil {
		// Cut off by the node's stop: due again at once, for the next node or life.
		if err := d.cfg.Store.WebhookRetry(rctx, ev.ID, "the node stopped during the attempt", now, now, false); err != nil {
			log.Error().Err(err).Msg("record a webhook cut off by the stop")
		}
		return
	}
	giveUp := ev.Attempts > len(Backoff)
	next := now
	if !giveUp {
		next = now.Add(Backoff[ev.Attempts-1])
	}
	if giveUp {
		d.attempts.WithLabelValues("failed").Inc()
		log.Error().Err(err).Msg("a webhook failed for the last time; it is given up")
	} else {
		d.attempts.WithLabelValues("retry").Inc()
		log.Warn().Err(err).Time("next", next).Msg("a webhook failed; it will be tried again")
	}
	if err := d.cfg.Store.WebhookRetry(rctx, ev.ID, truncate(err.Error(), 500), now, next, giveUp); err != nil {
		log.Error().Err(err).Msg("record a failed webhook")
	}
}

// send POSTs one event: delivered on a 2xx answer.
func (d *Deliverer) send(ctx context.Context, ev store.WebhookEvent) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(ev.Payload))
	if err != nil {
		return err
	}
	id := ev.ID.String()
	ts := d.cfg.Clock.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chatd-webhooks")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(d.secret, id, ts, ev.Payload))
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
