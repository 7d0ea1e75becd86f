package registry

import (
	"context"
	"errors"
	"net/http"

	"github.com/hashicorp/consul/api"
)

// ConsulReady says whether the Consul agent at addr (host:port of its HTTP
// API) can hold the registry: it has a leader, and its node is in the
// catalog (the writer lock's session needs both). token is an ACL token
// allowed to read the node, or "" without ACLs; hc makes the requests.
func ConsulReady(ctx context.Context, hc *http.Client, addr, token, node string) error {
	c, err := api.NewClient(&api.Config{Address: addr, Token: token, HttpClient: hc})
	if err != nil {
		return err
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	leader, err := c.Status().LeaderWithQueryOptions(q)
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	n, _, err := c.Catalog().Node(node, q)
	if err != nil {
		return err
	}
	if n == nil {
		return errors.New("its node " + node + " is not registered yet")
	}
	return nil
}
