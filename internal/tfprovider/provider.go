// Package tfprovider is the cellkit Terraform provider: the cell map, cells
// and overrides as resources, the map and a user's route as data sources.
// Every change runs the matching cellctl command in process (see client),
// so Terraform and cellctl share one implementation of every map change,
// and what an operator changes with cellctl shows as drift in the next
// plan.
package tfprovider

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/cellkit/cellkit/internal/adminclient"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/cellkit/cellkit"

// DefaultLockWait is how long a change waits for the registry's writer lock
// unless lock_wait says otherwise.
const DefaultLockWait = 30 * time.Second

// New returns the provider; version is the build's.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &cellkitProvider{version: version} }
}

type cellkitProvider struct{ version string }

var _ provider.Provider = (*cellkitProvider)(nil)

type providerModel struct {
	Registry   types.String `tfsdk:"registry"`
	LockWait   types.String `tfsdk:"lock_wait"`
	AdminToken types.String `tfsdk:"admin_token"`
	LeaveData  types.Bool   `tfsdk:"leave_data"`
	MoveRate   types.Int64  `tfsdk:"move_rate"`
}

func (p *cellkitProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "cellkit"
	resp.Version = p.version
}

func (p *cellkitProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Declares cellkit's cell map, cells and user overrides in a registry (a file or Consul). Every change goes through cellctl's code: the same plan, writer lock, compare-and-swap, history and queue-aware drain.",
		Attributes: map[string]schema.Attribute{
			"registry": schema.StringAttribute{
				Optional:    true,
				Description: "The registry: file:PATH or consul://HOST:PORT/PREFIX. Default $CELLKIT_REGISTRY. The Consul ACL token comes from CONSUL_HTTP_TOKEN.",
			},
			"lock_wait": schema.StringAttribute{
				Optional:    true,
				Description: `How long a change waits for the registry's writer lock when someone else holds it, as a Go duration ("30s" by default); past it the apply fails naming the holder and changes nothing.`,
			},
			"admin_token": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "Bearer token of the cells' admin APIs (a drain closes a cell's intake and watches its queue; a change moves the users' inquiries between cells). Default $CELLKIT_ADMIN_TOKEN.",
			},
			"move_rate": schema.Int64Attribute{
				Optional:    true,
				Description: "The most messages a second a change's data move copies between two cells (0 or unset: as fast as the cells take them), sparing the cells' stores under load.",
			},
			"leave_data": schema.BoolAttribute{
				Optional:    true,
				Description: "Change the map even when a cell whose users move does not answer: their inquiries stay in that cell (read through the users' new cell while it answers, moved when it is marked drained or removed; lost if it is removed without answering). Unset, such a change fails and changes nothing.",
			},
		},
	}
}

func (p *cellkitProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	reg := m.Registry.ValueString()
	if reg == "" {
		reg = os.Getenv(registry.EnvRegistry)
	}
	if reg == "" {
		resp.Diagnostics.AddAttributeError(path.Root("registry"), "No registry",
			"Set the provider's registry (file:PATH or consul://HOST:PORT/PREFIX) or $"+registry.EnvRegistry+".")
		return
	}
	wait := DefaultLockWait
	if s := m.LockWait.ValueString(); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			resp.Diagnostics.AddAttributeError(path.Root("lock_wait"), "Invalid lock_wait",
				`lock_wait must be a positive Go duration such as "30s" or "2m", not `+s+".")
			return
		}
		wait = d
	}
	token := m.AdminToken.ValueString()
	if token == "" {
		token = os.Getenv(adminclient.EnvToken)
	}
	if m.MoveRate.ValueInt64() < 0 {
		resp.Diagnostics.AddAttributeError(path.Root("move_rate"), "Invalid move_rate", fmt.Sprintf("move_rate must not be negative, not %d.", m.MoveRate.ValueInt64()))
		return
	}
	c := newClient(reg, wait, token, control.MoveConfig{LeaveData: m.LeaveData.ValueBool(), Rate: int(m.MoveRate.ValueInt64())})
	resp.ResourceData, resp.DataSourceData = c, c
}

func (p *cellkitProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newMapResource, newCellResource, newOverrideResource}
}

func (p *cellkitProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newMapDataSource, newLookupDataSource}
}
