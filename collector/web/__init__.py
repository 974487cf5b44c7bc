"""The collector's pages and the API behind them (issue 17): who may see what
(:mod:`collector.web.session`), what is read (:mod:`collector.web.overview`,
:mod:`collector.web.dayview`, :mod:`collector.web.tripview`), how it is drawn
(:mod:`collector.web.svg`) and served (:mod:`collector.web.pages`, :mod:`collector.web.api`).
docs/pages.md describes them."""
