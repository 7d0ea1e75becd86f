package cell

import (
	"errors"
	"net"
	"net/http"

	"github.com/cellkit/cellkit/internal/httpx"
)

// IntakeAddr is the intake listener's address.
func (c *Cell) IntakeAddr() net.Addr { return c.intakeLn.Addr() }

// AdminAddr is the admin listener's address.
func (c *Cell) AdminAddr() net.Addr { return c.adminLn.Addr() }

// IntakeURL is the intake's base URL: https when it speaks TLS. The map
// must name the cell's intake with this scheme (cellctl provision or
// endpoints --intake), since routers call the URL the map gives.
func (c *Cell) IntakeURL() string { return baseURL(c.intakeTLS, c.IntakeAddr()) }

// AdminURL is the admin API's base URL: https when it speaks TLS.
func (c *Cell) AdminURL() string { return baseURL(c.adminTLS, c.AdminAddr()) }

func baseURL(tls bool, addr net.Addr) string {
	if tls {
		return "https://" + addr.String()
	}
	return "http://" + addr.String()
}

// contained serves h with a panic recovered: logged with its stack,
// counted (cellkit_cell_panics_total{step}) and answered 500 with a
// problem body, or, when the answer had begun, cut off as net/http does.
func (c *Cell) contained(step string, h http.Handler) http.Handler {
	return httpx.Contain(h, func(v any, r *http.Request) {
		c.pipe.Recovered(step, v, "method", r.Method, "path", r.URL.Path)
	})
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
