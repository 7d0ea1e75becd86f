package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// mapDataSource is data.cellkit_map: the map as the registry holds it.
type mapDataSource struct{ c *client }

var _ datasource.DataSourceWithConfigure = (*mapDataSource)(nil)

func newMapDataSource() datasource.DataSource { return &mapDataSource{} }

var cellAttrTypes = map[string]attr.Type{
	"id": types.StringType, "state": types.StringType, "weight": types.Int64Type,
	"intake": types.StringType, "admin": types.StringType,
	"slots": types.Int64Type, "share": types.Float64Type,
	"quota": types.MapType{ElemType: types.Int64Type},
}

type mapDataModel struct {
	Version   types.Int64  `tfsdk:"version"`
	Slots     types.Int64  `tfsdk:"slots"`
	Change    types.String `tfsdk:"change"`
	Agencies  types.Map    `tfsdk:"agencies"`
	Cells     types.List   `tfsdk:"cells"`
	Overrides types.Map    `tfsdk:"overrides"`
}

func (d *mapDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_map"
}

func (d *mapDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The cell map in the registry: version, agencies, cells with their slots, share of users and session quotas, overrides.",
		Attributes: map[string]schema.Attribute{
			"version":   schema.Int64Attribute{Computed: true, Description: "The map version."},
			"slots":     schema.Int64Attribute{Computed: true, Description: "Slots users hash to."},
			"change":    schema.StringAttribute{Computed: true, Description: "What produced this version."},
			"agencies":  schema.MapAttribute{Computed: true, ElementType: types.Int64Type, Description: "Each agency's global session limit."},
			"overrides": schema.MapAttribute{Computed: true, ElementType: types.StringType, Description: "User id → cell."},
			"cells": schema.ListAttribute{
				Computed: true, ElementType: types.ObjectType{AttrTypes: cellAttrTypes},
				Description: "The cells, by id: state, weight, URLs, slots, share of users (0–1) and session quota per agency.",
			},
		},
	}
}

func (d *mapDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, _ *datasource.ConfigureResponse) {
	d.c = configured(req.ProviderData, d.c)
}

func (d *mapDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	m, err := d.c.load(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the map", err.Error())
		return
	}
	counts := m.SlotCounts()
	var cells []attr.Value
	for _, c := range m.Cells() {
		q := map[string]attr.Value{}
		for a, n := range c.Quota {
			q[a] = types.Int64Value(int64(n))
		}
		qv, diags := types.MapValue(types.Int64Type, q)
		resp.Diagnostics.Append(diags...)
		obj, diags := types.ObjectValue(cellAttrTypes, map[string]attr.Value{
			"id": types.StringValue(c.ID), "state": types.StringValue(string(c.State)), "weight": types.Int64Value(int64(c.Weight)),
			"intake": types.StringValue(c.Intake), "admin": types.StringValue(c.Admin),
			"slots": types.Int64Value(int64(counts[c.ID])), "share": types.Float64Value(float64(counts[c.ID]) / float64(m.Slots())),
			"quota": qv,
		})
		resp.Diagnostics.Append(diags...)
		cells = append(cells, obj)
	}
	out := mapDataModel{Version: types.Int64Value(m.Version()), Slots: types.Int64Value(int64(m.Slots())), Change: types.StringValue(m.Change())}
	lv, dg := types.ListValue(types.ObjectType{AttrTypes: cellAttrTypes}, cells)
	resp.Diagnostics.Append(dg...)
	out.Cells = lv
	limits := map[string]int64{}
	for k, n := range m.Agencies() {
		limits[k] = int64(n)
	}
	av, dg := types.MapValueFrom(ctx, types.Int64Type, limits)
	resp.Diagnostics.Append(dg...)
	out.Agencies = av
	ov, dg := types.MapValueFrom(ctx, types.StringType, m.Overrides())
	resp.Diagnostics.Append(dg...)
	out.Overrides = ov
	resp.Diagnostics.Append(resp.State.Set(ctx, &out)...)
}

// lookupDataSource is data.cellkit_lookup: where the map sends a user.
type lookupDataSource struct{ c *client }

var _ datasource.DataSourceWithConfigure = (*lookupDataSource)(nil)

func newLookupDataSource() datasource.DataSource { return &lookupDataSource{} }

type lookupModel struct {
	User     types.String `tfsdk:"user"`
	Slot     types.Int64  `tfsdk:"slot"`
	Cell     types.String `tfsdk:"cell"`
	Override types.Bool   `tfsdk:"override"`
	Version  types.Int64  `tfsdk:"version"`
}

func (d *lookupDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lookup"
}

func (d *lookupDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Where the current map sends a user: slot and cell (as cellctl map lookup).",
		Attributes: map[string]schema.Attribute{
			"user":     schema.StringAttribute{Required: true, Description: "The user id."},
			"slot":     schema.Int64Attribute{Computed: true, Description: "The slot the user hashes to."},
			"cell":     schema.StringAttribute{Computed: true, Description: "The cell serving the user (empty when no cell is active)."},
			"override": schema.BoolAttribute{Computed: true, Description: "Whether an override pins the user."},
			"version":  schema.Int64Attribute{Computed: true, Description: "The map version looked up."},
		},
	}
}

func (d *lookupDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, _ *datasource.ConfigureResponse) {
	d.c = configured(req.ProviderData, d.c)
}

func (d *lookupDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m lookupModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	cur, err := d.c.load(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the map", err.Error())
		return
	}
	r := cur.Lookup(m.User.ValueString())
	m.Slot, m.Cell, m.Override, m.Version = types.Int64Value(int64(r.Slot)), types.StringValue(r.Cell), types.BoolValue(r.Override), types.Int64Value(cur.Version())
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
