package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
	"github.com/cellkit/cellkit/internal/slotmap"
)

// DefaultDrainTimeout bounds a drain's wait for the cell's queue unless the
// timeouts block says otherwise.
const DefaultDrainTimeout = 20 * time.Minute

// cellResource is cellkit_cell. Create is `cellctl provision` (then `quota
// set` for fixed quotas); a weight change is `cellctl weight`, new URLs
// `cellctl endpoints`; state "drained" is `cellctl drain --wait` (bounded
// by the timeouts block), back to "active" `cellctl undrain`; destroy is a
// drain and `cellctl remove`.
type cellResource struct{ c *client }

var (
	_ resource.ResourceWithConfigure   = (*cellResource)(nil)
	_ resource.ResourceWithImportState = (*cellResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*cellResource)(nil)
)

func newCellResource() resource.Resource { return &cellResource{} }

type cellModel struct {
	ID           types.String   `tfsdk:"id"`
	Intake       types.String   `tfsdk:"intake"`
	Admin        types.String   `tfsdk:"admin"`
	Weight       types.Int64    `tfsdk:"weight"`
	Capacity     types.Int64    `tfsdk:"capacity"`
	State        types.String   `tfsdk:"state"`
	FixedQuota   types.Map      `tfsdk:"fixed_quota"`
	ForceDestroy types.Bool     `tfsdk:"force_destroy"`
	Timeouts     timeouts.Value `tfsdk:"timeouts"`
}

func (r *cellResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cell"
}

func (r *cellResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A cell in the map. Create provisions it (its share of slots moves to it); a weight change rebalances; state = \"drained\" drains it and waits until its queue and in-flight work are empty (bounded by timeouts), \"active\" undrains it; destroy drains and removes it. Import by cell id.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Required:      true,
				Description:   "The cell id: 1–32 of [a-z0-9-], starting and ending with a letter or digit.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"intake": schema.StringAttribute{Required: true, Description: "Base URL of the cell's intake API (http or https)."},
			"admin":  schema.StringAttribute{Required: true, Description: "Base URL of the cell's admin API."},
			"weight": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(1),
				Description: "Relative share of slots and session quota, 1 or more.",
			},
			"capacity": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Description: "The request rate (req/s) the cell can take, 0 for none declared: cellctl plans with the routers' measured traffic flag a cell projected over it, and rebalance --by traffic shares load by it.",
			},
			"state": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(string(slotmap.Active)),
				Description: `"active" or "drained". A cell left "draining" by an interrupted drain reads as "draining": the next apply finishes the drain or undrains it.`,
				Validators:  []validator.String{stringvalidator.OneOf(string(slotmap.Active), string(slotmap.Drained))},
			},
			"fixed_quota": schema.MapAttribute{
				Optional:    true,
				ElementType: types.Int64Type,
				Description: "Sessions per agency fixed for this cell (the other cells share the rest of the agency's limit by weight).",
			},
			"force_destroy": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "On destroy, mark the cell drained without waiting for its queue and remove it even when it does not answer (for a cell that is gone for good: what it still holds is lost with it; a cell that answers hands its users' inquiries over first).",
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func (r *cellResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	r.c = configured(req.ProviderData, r.c)
}

func quotas(ctx context.Context, v types.Map) (map[string]int, diag.Diagnostics) {
	out := map[string]int{}
	if v.IsNull() || v.IsUnknown() {
		return out, nil
	}
	var raw map[string]int64
	d := v.ElementsAs(ctx, &raw, false)
	for k, n := range raw {
		out[k] = int(n)
	}
	return out, d
}

// ModifyPlan checks a create or a change against the current map with
// cellctl's own dry runs, so that what apply would refuse fails the plan,
// with cellctl's reason on the attribute.
func (r *cellResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var plan cellModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.ID.IsUnknown() {
		return
	}
	id := plan.ID.ValueString()
	if n := plan.Capacity.ValueInt64(); !plan.Capacity.IsUnknown() && (n < 0 || n > slotmap.MaxCapacity) {
		resp.Diagnostics.AddAttributeError(path.Root("capacity"), "Invalid capacity", fmt.Sprintf("capacity must be in 0..%d req/s, not %d.", slotmap.MaxCapacity, n))
	}
	if !plan.Weight.IsUnknown() && plan.Weight.ValueInt64() < 1 {
		resp.Diagnostics.AddAttributeError(path.Root("weight"), "Invalid weight", fmt.Sprintf("weight must be 1 or more, not %d.", plan.Weight.ValueInt64()))
	}
	for _, a := range []struct {
		name string
		v    types.String
	}{{"intake", plan.Intake}, {"admin", plan.Admin}} {
		if a.v.IsUnknown() {
			continue
		}
		if err := slotmap.CheckURL(a.v.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root(a.name), "Invalid URL", err.Error())
		}
	}
	fixed, d := quotas(ctx, plan.FixedQuota)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	m, err := r.c.load(ctx)
	if errors.Is(err, registry.ErrNoMap) {
		return // the map is created in the same apply
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the map", err.Error())
		return
	}
	_, exists := m.Cell(id)
	if req.State.Raw.IsNull() && exists {
		resp.Diagnostics.AddAttributeError(path.Root("id"), "Duplicate cell id",
			fmt.Sprintf("Cell %q is already in map version %d: import it (terraform import <address> %s) or choose another id.", id, m.Version(), id))
		return
	}
	if req.State.Raw.IsNull() && !plan.Intake.IsUnknown() && !plan.Admin.IsUnknown() && !plan.Weight.IsUnknown() {
		if err := r.c.check(ctx, control.Provision(cellOf(id, plan))); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("id"), "Cell refused", err.Error())
		}
	}
	// Fixed quotas: each within its agency's limit together with the other
	// cells' fixed quotas.
	limits := m.Agencies()
	for _, agency := range slices.Sorted(maps.Keys(fixed)) {
		n := fixed[agency]
		limit, ok := limits[agency]
		at := path.Root("fixed_quota").AtMapKey(agency)
		switch {
		case !ok:
			resp.Diagnostics.AddAttributeError(at, "Unknown agency", fmt.Sprintf("The map has no agency %q (agencies: %v).", agency, slices.Sorted(maps.Keys(limits))))
		case n < 0:
			resp.Diagnostics.AddAttributeError(at, "Invalid quota", fmt.Sprintf("A quota is 0 or more, not %d.", n))
		default:
			others := 0
			for _, c := range m.Cells() {
				if c.ID != id {
					others += c.FixedQuota[agency]
				}
			}
			if others+n > limit {
				resp.Diagnostics.AddAttributeError(at, "Quota over the agency's limit",
					fmt.Sprintf("%s's limit is %d sessions and the other cells hold %d fixed: %d more for %s is over it.", agency, limit, others, n, id))
			}
		}
	}
}

func (r *cellResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan cellModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	within, d := plan.Timeouts.Create(ctx, DefaultDrainTimeout)
	resp.Diagnostics.Append(d...)
	id := plan.ID.ValueString()
	if err := r.c.change(ctx, "provision", control.Provision(cellOf(id, plan))); err != nil {
		resp.Diagnostics.AddError("Cannot provision cell "+id, err.Error())
		return
	}
	// From here on the cell exists: save what is true even if a later step fails.
	r.converge(ctx, id, cellModel{State: types.StringValue(string(slotmap.Active)), FixedQuota: types.MapNull(types.Int64Type)}, plan, within, &resp.Diagnostics)
	r.refresh(ctx, &plan, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// converge applies what differs between from and to, each step one cellctl
// command: URLs, weight, capacity, fixed quotas, then the state.
func (r *cellResource) converge(ctx context.Context, id string, from, to cellModel, within time.Duration, diags *diag.Diagnostics) {
	if !from.Intake.IsNull() && (!from.Intake.Equal(to.Intake) || !from.Admin.Equal(to.Admin)) {
		if err := r.c.change(ctx, "endpoints", control.SetEndpoints(id, to.Intake.ValueString(), to.Admin.ValueString())); err != nil {
			diags.AddAttributeError(path.Root("intake"), "Cannot change the cell's URLs", err.Error())
			return
		}
	}
	if !from.Weight.IsNull() && !from.Weight.Equal(to.Weight) {
		if err := r.c.change(ctx, "weight", control.SetWeight(id, int(to.Weight.ValueInt64()))); err != nil {
			diags.AddAttributeError(path.Root("weight"), "Cannot change the weight", err.Error())
			return
		}
	}
	if from.Capacity.ValueInt64() != to.Capacity.ValueInt64() {
		if err := r.c.change(ctx, "capacity set", control.SetCapacity(id, int(to.Capacity.ValueInt64()))); err != nil {
			diags.AddAttributeError(path.Root("capacity"), "Cannot declare the capacity", err.Error())
			return
		}
	}
	old, _ := quotas(ctx, from.FixedQuota)
	want, _ := quotas(ctx, to.FixedQuota)
	for _, agency := range slices.Sorted(maps.Keys(old)) {
		if _, keep := want[agency]; !keep {
			if err := r.c.change(ctx, "quota clear", control.ClearQuota(agency, id)); err != nil {
				diags.AddAttributeError(path.Root("fixed_quota").AtMapKey(agency), "Cannot clear the quota", err.Error())
				return
			}
		}
	}
	for _, agency := range slices.Sorted(maps.Keys(want)) {
		if n, had := old[agency]; !had || n != want[agency] {
			if err := r.c.change(ctx, "quota set", control.SetQuota(agency, id, want[agency])); err != nil {
				diags.AddAttributeError(path.Root("fixed_quota").AtMapKey(agency), "Cannot set the quota", err.Error())
				return
			}
		}
	}
	if from.State.Equal(to.State) {
		return
	}
	switch to.State.ValueString() {
	case string(slotmap.Drained):
		r.drain(ctx, id, false, false, within, diags)
	case string(slotmap.Active):
		warning, err := r.c.undrain(ctx, id)
		if err != nil {
			diags.AddAttributeError(path.Root("state"), "Cannot undrain "+id, err.Error())
		} else if warning != "" {
			diags.AddAttributeWarning(path.Root("state"), "Intake of "+id+" not reopened", warning)
		}

	}
}

// drain drains the cell as `cellctl drain --wait` (or --force) does,
// within the timeout; last lets it drain the last active cell (a destroy).
func (r *cellResource) drain(ctx context.Context, id string, force, last bool, within time.Duration, diags *diag.Diagnostics) {
	if err := r.c.drain(ctx, control.DrainRequest{Cell: id, Wait: !force, Force: force, Last: last}, within); err != nil {
		diags.AddAttributeError(path.Root("state"), "Cannot drain "+id,
			err.Error()+" (the cell stays draining: its slots moved and its intake is closed; the next apply resumes the drain)")
	}
}

// refresh sets m from the registry's map; false when the cell is gone.
func (r *cellResource) refresh(ctx context.Context, m *cellModel, diags *diag.Diagnostics) bool {
	cur, err := r.c.load(ctx)
	if errors.Is(err, registry.ErrNoMap) {
		return false
	}
	if err != nil {
		diags.AddError("Cannot read the map", err.Error())
		return true
	}
	c, ok := cur.Cell(m.ID.ValueString())
	if !ok {
		return false
	}
	m.Intake, m.Admin = types.StringValue(c.Intake), types.StringValue(c.Admin)
	m.Weight = types.Int64Value(int64(c.Weight))
	m.Capacity = types.Int64Value(int64(c.Capacity))
	m.State = types.StringValue(string(c.State))
	if len(c.FixedQuota) == 0 {
		m.FixedQuota = types.MapNull(types.Int64Type)
	} else {
		fq := map[string]int64{}
		for k, n := range c.FixedQuota {
			fq[k] = int64(n)
		}
		v, d := types.MapValueFrom(ctx, types.Int64Type, fq)
		diags.Append(d...)
		m.FixedQuota = v
	}
	return true
}

func (r *cellResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m cellModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !r.refresh(ctx, &m, &resp.Diagnostics) {
		resp.State.RemoveResource(ctx)
		return
	}
	if m.ForceDestroy.IsNull() {
		m.ForceDestroy = types.BoolValue(false)
	}
	if m.Timeouts.IsNull() {
		m.Timeouts = timeouts.Value{Object: types.ObjectNull(m.Timeouts.AttributeTypes(ctx))}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *cellResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state cellModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	within, d := plan.Timeouts.Update(ctx, DefaultDrainTimeout)
	resp.Diagnostics.Append(d...)
	r.converge(ctx, plan.ID.ValueString(), state, plan, within, &resp.Diagnostics)
	if !r.refresh(ctx, &plan, &resp.Diagnostics) {
		resp.Diagnostics.AddError("Cell gone", "Cell "+plan.ID.ValueString()+" left the map during the update.")
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *cellResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state cellModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	within, d := state.Timeouts.Delete(ctx, DefaultDrainTimeout)
	resp.Diagnostics.Append(d...)
	id := state.ID.ValueString()
	cur := state
	if !r.refresh(ctx, &cur, &resp.Diagnostics) {
		return // already gone
	}
	// A cell gone for good (force_destroy) cannot hand its users'
	// inquiries over: they are left, and lost with it.
	c := r.c
	if state.ForceDestroy.ValueBool() {
		c = r.c.leavingData()
	}
	if cur.State.ValueString() != string(slotmap.Drained) {
		(&cellResource{c: c}).drain(ctx, id, state.ForceDestroy.ValueBool(), true, within, &resp.Diagnostics)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	if err := c.change(ctx, "remove", control.Remove(id)); err != nil {
		resp.Diagnostics.AddError("Cannot remove cell "+id, err.Error())
	}
}

func (r *cellResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

// cellOf is the cell plan declares, as provision adds it.
func cellOf(id string, plan cellModel) slotmap.Cell {
	return slotmap.Cell{ID: id, Weight: int(plan.Weight.ValueInt64()), Intake: plan.Intake.ValueString(), Admin: plan.Admin.ValueString()}
}
