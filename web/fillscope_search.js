// FillScope: the FLUX Fill nodes first among FillScope's nodes in the frontend's node search ("fill" in the canvas'
// search box or the node library's).
//
// How both frontends rank (1.32.9 and 1.58.1 alike: NodeSearchService, a FuseSearch with advancedScoring): Fuse picks
// the nodes that match in the node id or the display name (1.58.1: or a search alias), then sorts them by a tuple,
// smallest first:
//   [how the query meets the best of id and display name: 0 equal, 1 a prefix, 2 a word, 3 inside, 4-5 words apart,
//    -(the node's recorded use, the frontend's assets/sorted-custom-node-map.json; none for FillScope's nodes),
//    where it meets, the length of the text it meets, Fuse's score]
// (ComfyNodeDefImpl.postProcessSearchScores inserts the second entry). Search aliases widen what matches but rank
// nothing (the tuple reads the string keys only; 1.32.9 searches no aliases, and ComfyUI 0.3.75 sends none), and
// descriptions are not searched. Every FillScope id starts with "FillScope", so "fill" is a prefix of all of them
// (1) while the FLUX Fill nodes hold it as a word of their display names (2): each node ranked by its id, shortest
// first, and 27 nodes (Batch Manifest, Load T5-XXL, Inpaint Stitch, ...) came before the first FLUX Fill one. Only a
// display name that starts with "Fill" and is shorter than "FillScopeBatch" could outrank them; ids never change
// (saved workflows name them).
//
// So the second entry, where equally matched nodes are ordered by use, is given a fraction below 0 for the FLUX Fill
// nodes, in FLUX_FILL_FIRST's order: among equally matched nodes of no recorded use they come first; any node with a
// recorded use still ranks above them, and no other node's tuple changes. The frontend's own method is wrapped (on
// ComfyNodeDefImpl's prototype, reached through a registered node type's nodeData); a frontend without it keeps its
// ranking untouched. tests/test_browser_node_search.py types "fill" on both frontends.
import { app } from "../../scripts/app.js";

export const FLUX_FILL_FIRST = [
  "FillScopeFluxFillSampler", "FillScopeFluxFillCondition", "FillScopeLoadFluxFillTransformer",
  "FillScopeFluxFillTiledInpaint", "FillScopeFluxFillLoRA", "FillScopeFluxFillTrace", "FillScopeFluxFillCompareRun",
];
const LEAD = new Map(FLUX_FILL_FIRST.map((id, i) => [id, (FLUX_FILL_FIRST.length - i) / 1000]));

/** Wrap the node definitions' postProcessSearchScores once; true when the ranking is in place. */
export function rankFluxFillFirst(nodeTypes) {
  const def = nodeTypes?.[FLUX_FILL_FIRST[0]]?.nodeData;
  const proto = def && Object.getPrototypeOf(def);
  const own = proto?.postProcessSearchScores;
  if (typeof own !== "function") return false;
  if (own.fillscopeRanked) return true;
  const ranked = function (scores) {
    const out = own.call(this, scores);
    const lead = LEAD.get(this?.name);
    // the frontend's shape only: the use entry inserted second, a number
    if (!lead || !Array.isArray(out) || !Array.isArray(scores) || out.length !== scores.length + 1
        || typeof out[1] !== "number") return out;
    const moved = out.slice();
    moved[1] -= lead;
    return moved;
  };
  ranked.fillscopeRanked = true;
  proto.postProcessSearchScores = ranked;
  return true;
}

app.registerExtension({
  name: "FillScope.NodeSearch",
  async setup() {
    if (!rankFluxFillFirst(window.LiteGraph?.registered_node_types)) {
      console.info("[FillScope] node search: this frontend's ranking is not the known one; left as it is");
    }
  },
});
