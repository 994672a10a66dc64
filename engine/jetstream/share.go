//go:build !nojetstream

package jetstream

// ClientURL returns the URL another engine passes as its "url" parameter
// to share this engine's stream as another Tidemark node: the embedded
// server's client URL, or the "url" this engine was opened with. The
// embedded server stops when this engine closes, so engines sharing it
// must close first. It is empty when the engine must stay the stream's
// only writer (commit=wal).
func (d *db) ClientURL() string {
	if d.wal {
		return "" // nobody else may write
	}
	if d.srv != nil {
		return d.srv.ClientURL()
	}
	return d.opts.Params["url"]
}
