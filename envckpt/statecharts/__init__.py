"""Chart tooling over the machine tables: Mermaid charts, their pages and embeds, run overlays.

Not the engine (that is ``envckpt.machines``): what ``envckpt statecharts``
draws, checks and renders from the same tables that run::

    charts.mermaid(table)            # a table's chart, Mermaid stateDiagram-v2
    embeds.write(Path("statecharts"))  # the committed charts and their pages
    overlay.overlay(table, records)  # a recorded run drawn on its chart
    renderer.render_svgs(...)        # the real renderer (mermaid-cli in Chromium)
    svg_layout.read_svg(text)        # what a reader sees in a rendered SVG
"""
