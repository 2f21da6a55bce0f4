"""Compositing around the model: crop and stitch, tone matching, outpaint padding, removal."""
