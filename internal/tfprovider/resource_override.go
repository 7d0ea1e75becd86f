package tfprovider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/registry"
)

// overrideResource is cellkit_override: `cellctl override set` and `cellctl
// override clear`.
type overrideResource struct{ c *client }

var (
	_ resource.ResourceWithConfigure   = (*overrideResource)(nil)
	_ resource.ResourceWithImportState = (*overrideResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*overrideResource)(nil)
)

func newOverrideResource() resource.Resource { return &overrideResource{} }

type overrideModel struct {
	User types.String `tfsdk:"user"`
	Cell types.String `tfsdk:"cell"`
}

func (r *overrideResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_override"
}

func (r *overrideResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Pins a user to a cell whatever slot the user hashes to (a hot user). The cell must be active; reference a cellkit_cell's id so that the cell exists first. Import by user id.",
		Attributes: map[string]schema.Attribute{
			"user": schema.StringAttribute{
				Required: true, Description: "The user id.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"cell": schema.StringAttribute{Required: true, Description: "The cell the user goes to."},
		},
	}
}

func (r *overrideResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	r.c = configured(req.ProviderData, r.c)
}

// ModifyPlan runs cellctl's dry run of the override against the current
// map: an unknown or inactive cell fails the plan on the cell attribute.
func (r *overrideResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var plan overrideModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.User.IsUnknown() || plan.Cell.IsUnknown() {
		return
	}
	if _, err := r.c.load(ctx); errors.Is(err, registry.ErrNoMap) {
		return // the map is created in the same apply
	}
	if err := r.c.check(ctx, control.SetOverride(plan.User.ValueString(), plan.Cell.ValueString())); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("cell"), "Override refused", err.Error())
	}
}

// set pins the planned user to the planned cell and records it: create
// and update are the same command.
func (r *overrideResource) set(ctx context.Context, plan tfsdk.Plan, state *tfsdk.State, diags *diag.Diagnostics) {
	var m overrideModel
	diags.Append(plan.Get(ctx, &m)...)
	if diags.HasError() {
		return
	}
	if err := r.c.change(ctx, "override set", control.SetOverride(m.User.ValueString(), m.Cell.ValueString())); err != nil {
		diags.AddError("Cannot pin "+m.User.ValueString(), err.Error())
		return
	}
	diags.Append(state.Set(ctx, &m)...)
}

func (r *overrideResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.set(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

func (r *overrideResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m overrideModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	cur, err := r.c.load(ctx)
	if errors.Is(err, registry.ErrNoMap) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the map", err.Error())
		return
	}
	cell, ok := cur.Overrides()[m.User.ValueString()]
	if !ok {
		resp.State.RemoveResource(ctx)
		return
	}
	m.Cell = types.StringValue(cell)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *overrideResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.set(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

func (r *overrideResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m overrideModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.change(ctx, "override clear", control.ClearOverride(m.User.ValueString())); err != nil {
		resp.Diagnostics.AddError("Cannot clear the override of "+m.User.ValueString(), err.Error())
	}
}

func (r *overrideResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("user"), req.ID)...)
}
