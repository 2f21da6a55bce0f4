// FillScope canvas extension: shows each FillScope node's shape table on the node after it runs.
// Text only (textContent / widget values), never HTML built from data.
import { app } from "../../scripts/app.js";

app.registerExtension({
  name: "FillScope.ShapesOnNodes",
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData?.name?.startsWith("FillScope")) return;
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      const text = Array.isArray(message?.text) ? message.text.join("\n") : "";
      if (!text) return;
      let widget = this.widgets?.find((w) => w.name === "fillscope_shapes");
      if (!widget) {
        widget = this.addWidget("text", "fillscope_shapes", "", () => {}, { multiline: true, serialize: false });
        widget.serialize = false;
      }
      widget.value = String(text);
      if (widget.inputEl) {
        widget.inputEl.readOnly = true;
        widget.inputEl.value = String(text);
      }
      this.setDirtyCanvas?.(true, true);
    };
  },
});
