package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// mapResource is cellkit_map: the map's slot count and the agencies'
// session limits. Create is `cellctl init`; a limit change is `cellctl
// quota limit`.
type mapResource struct{ c *client }

var (
	_ resource.ResourceWithConfigure   = (*mapResource)(nil)
	_ resource.ResourceWithImportState = (*mapResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*mapResource)(nil)
)

func newMapResource() resource.Resource { return &mapResource{} }

type mapModel struct {
	ID       types.String `tfsdk:"id"`
	Slots    types.Int64  `tfsdk:"slots"`
	Agencies types.Map    `tfsdk:"agencies"`
}

func (r *mapResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_map"
}

func (r *mapResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The cell map in the provider's registry: its slot count and each agency's global session limit (cellctl init; a limit change is cellctl quota limit). Import by the registry URL. Destroying it leaves the registry's map in place, without cells.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "The registry URL.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"slots": schema.Int64Attribute{
				Optional: true, Computed: true,
				Default:       int64default.StaticInt64(slotmap.DefaultSlots),
				Description:   "Slots users hash to, fixed for the map's life.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"agencies": schema.MapAttribute{
				Required:    true,
				ElementType: types.Int64Type,
				Description: "Each agency's global session limit, shared by the cells.",
			},
		},
	}
}

func (r *mapResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	r.c = configured(req.ProviderData, r.c)
}

func agencyLimits(ctx context.Context, v types.Map) (map[string]int, error) {
	var raw map[string]int64
	if d := v.ElementsAs(ctx, &raw, false); d.HasError() {
		return nil, errors.New("agencies must map names to session limits")
	}
	out := make(map[string]int, len(raw))
	for k, n := range raw {
		out[k] = int(n)
	}
	return out, nil
}

func (r *mapResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var plan mapModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Agencies.IsUnknown() || plan.Slots.IsUnknown() {
		return
	}
	limits, err := agencyLimits(ctx, plan.Agencies)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("agencies"), "Invalid agencies", err.Error())
		return
	}
	if req.State.Raw.IsNull() {
		// A new map: the same checks as cellctl init.
		if _, err := slotmap.New(int(plan.Slots.ValueInt64()), limits); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("agencies"), "Invalid map", err.Error())
		}
		return
	}
	var state mapModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	old, err := agencyLimits(ctx, state.Agencies)
	if err != nil {
		return
	}
	for name := range old {
		if _, ok := limits[name]; !ok {
			resp.Diagnostics.AddAttributeError(path.Root("agencies"), "An agency cannot be removed",
				fmt.Sprintf("Agency %q is in the map; cellkit does not remove an agency from a live map (cells hold its sessions). Keep it, or set its limit.", name))
		}
	}
	for _, name := range changedLimits(old, limits) {
		if err := r.c.check(ctx, control.SetLimit(name, limits[name])); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("agencies").AtMapKey(name), "Limit refused", err.Error())
		}
	}
}

// changedLimits lists the agencies whose limit is new or different, sorted.
func changedLimits(old, want map[string]int) []string {
	var out []string
	for name, n := range want {
		if o, ok := old[name]; !ok || o != n {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (r *mapResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mapModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limits, err := agencyLimits(ctx, plan.Agencies)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("agencies"), "Invalid agencies", err.Error())
		return
	}
	if m, err := r.c.load(ctx); err == nil {
		resp.Diagnostics.AddError("The registry already holds a map",
			fmt.Sprintf("Registry %s holds map version %d with %d cells; import it instead: terraform import <address> %s",
				r.c.registry, m.Version(), len(m.Cells()), r.c.registry))
		return
	}
	if err := r.c.init(ctx, int(plan.Slots.ValueInt64()), limits); err != nil {
		resp.Diagnostics.AddError("Cannot create the map", err.Error())
		return
	}
	r.read(ctx, &plan, &resp.Diagnostics, func() {})
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// read fills m from the registry; gone is called when there is no map.
func (r *mapResource) read(ctx context.Context, m *mapModel, diags *diag.Diagnostics, gone func()) {
	cur, err := r.c.load(ctx)
	if errors.Is(err, registry.ErrNoMap) {
		gone()
		return
	}
	if err != nil {
		diags.AddError("Cannot read the map", err.Error())
		return
	}
	limits := map[string]int64{}
	for k, n := range cur.Agencies() {
		limits[k] = int64(n)
	}
	av, d := types.MapValueFrom(ctx, types.Int64Type, limits)
	diags.Append(d...)
	m.ID = types.StringValue(r.c.registry)
	m.Slots = types.Int64Value(int64(cur.Slots()))
	m.Agencies = av
}

func (r *mapResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m mapModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	removed := false
	r.read(ctx, &m, &resp.Diagnostics, func() { removed = true })
	if removed {
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *mapResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state mapModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	want, err := agencyLimits(ctx, plan.Agencies)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("agencies"), "Invalid agencies", err.Error())
		return
	}
	old, _ := agencyLimits(ctx, state.Agencies)
	for _, name := range changedLimits(old, want) {
		if err := r.c.change(ctx, "quota limit", control.SetLimit(name, want[name])); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("agencies").AtMapKey(name), "Cannot change the limit", err.Error())
			return
		}
	}
	r.read(ctx, &plan, &resp.Diagnostics, func() {})
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *mapResource) Delete(ctx context.Context, _ resource.DeleteRequest, resp *resource.DeleteResponse) {
	cur, err := r.c.load(ctx)
	if err != nil && !errors.Is(err, registry.ErrNoMap) {
		resp.Diagnostics.AddError("Cannot read the map", err.Error())
		return
	}
	if cur != nil && len(cur.Cells()) > 0 {
		resp.Diagnostics.AddError("The map still has cells",
			fmt.Sprintf("Map version %d still has %d cells; destroy (or drain and remove) them first.", cur.Version(), len(cur.Cells())))
		return
	}
	resp.Diagnostics.AddWarning("The map stays in the registry",
		"cellkit_map is no longer managed; the registry keeps its (empty) map, which routers and cells may still read. Replace it with 'cellctl init --force' if need be.")
}

func (r *mapResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if req.ID != r.c.registry {
		resp.Diagnostics.AddError("Import by the provider's registry URL",
			fmt.Sprintf("The import id must be the provider's registry, %s; got %s.", r.c.registry, req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
