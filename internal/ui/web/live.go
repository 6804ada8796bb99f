package web

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/ui/live"
)

// heartbeat keeps idle live connections open through proxies and notices closed ones.
const heartbeat = 25 * time.Second

// live streams server-sent events to an open page: "change" when something the person may read
// in the page's namespace (or anywhere, for the overview) changed. The page then reads itself
// again, as the person.
func (s *Server) live(w http.ResponseWriter, r *http.Request, p access.Person) {
	if s.b.Hub == nil {
		s.fail(w, r, http.StatusNotFound, "live updates are off")
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, http.StatusInternalServerError, "the connection cannot stream")
		return
	}
	sub, err := s.b.Hub.Subscribe(p, r.URL.Query().Get("ns"))
	if errors.Is(err, live.ErrTooMany) {
		s.fail(w, r, http.StatusTooManyRequests, err.Error())
		return
	}
	defer s.b.Hub.Unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			fmt.Fprint(w, ": heartbeat\n\n")
		case <-sub.C:
			fmt.Fprint(w, "event: change\ndata: {}\n\n")
		}
		flusher.Flush()
	}
}
